// Fuzz target: bytes as an image file other than JPEG (PNG, GIF, WebP, BMP,
// TIFF: core/decode/image_probe + core/decode/ffmpeg_image_decoder, libavcodec) through
// the decode stage as a pipeline runs it — SampleTransformer (decode +
// crop/resize + flip + conversion) writing two samples into a batch slot,
// then the collate stage's compaction of the failed one(s). The first byte
// picks the format whose magic bytes are put in front of the rest, so the
// fuzzer spends its time inside the decoders rather than finding the
// signatures. Parameters (train or eval, output size 8..39, dtype, layout)
// come from a hash of the input; images over 2^20 pixels are refused by
// max_pixels so that every run stays fast.
// Properties: no sanitizer report; errors are the documented ones
// (InvalidArgument, DataLoss, or ResourceExhausted for the decode budgets,
// with a message); a sample that decodes once decodes again to the same
// bytes (no state leaks between images).
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "core/engine/batch_layout.h"
#include "core/engine/collate.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/two_sample_batch.h"

namespace conveyor::fuzz {
namespace {

bool DocumentedError(const absl::Status& st) {
  return (absl::IsInvalidArgument(st) || absl::IsDataLoss(st) || absl::IsResourceExhausted(st)) &&
         !st.message().empty();
}

// Magic bytes of the formats, picked by the input's first byte.
constexpr std::string_view kMagic[] = {std::string_view("\x89PNG\r\n\x1a\n", 8),
                                       "GIF89a",
                                       "RIFF",
                                       "BM",
                                       std::string_view("II*\0", 4),
                                       std::string_view("MM\0*", 4)};

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  if (size == 0) return 0;
  const uint64_t h = fuzz::HashBytes(data, size);
  const TransformSpec spec = fuzz::ImageSpecFor(h);
  FUZZ_CHECK(ValidateTransformSpec(spec).ok());
  // The first byte picks the magic (none: the input as it is, e.g. a whole
  // seed file); a WebP's "WEBP" tag goes after the 4-byte RIFF size.
  const int pick = data[0] % 8;
  std::vector<uint8_t> file;
  if (pick < 6) {
    const std::string_view magic = fuzz::kMagic[pick];
    file.assign(magic.begin(), magic.end());
    if (pick == 2) {
      file.insert(file.end(), data + 1, data + std::min<size_t>(size, 5));
      file.insert(file.end(), {'W', 'E', 'B', 'P'});
      if (size > 5) file.insert(file.end(), data + 5, data + size);
    } else {
      file.insert(file.end(), data + 1, data + size);
    }
  } else {
    file.assign(data + 1, data + size);
  }
  const std::span<const uint8_t> bytes(file);

  // One transformer per worker thread in the engine; one here, reused.
  static SampleTransformer* transformer = new SampleTransformer();
  fuzz::CheckTwoSampleBatch(*transformer, bytes, spec, h, fuzz::DocumentedError);
  return 0;
}
