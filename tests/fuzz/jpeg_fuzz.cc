// Fuzz target: bytes as a sample file through the decode stage as a
// pipeline runs it — SampleTransformer (core/decode/jpeg_decoder + crop/resize +
// flip + conversion) writing two samples into a batch slot, then the
// collate stage's compaction of the failed one(s). Parameters (train or
// eval, output size 8..39, dtype, layout, DCT scaling) come from a hash of
// the input; images over 2^20 pixels are refused by max_pixels so that
// every run stays fast.
// Properties: no sanitizer report; errors are the documented ones
// (InvalidArgument or DataLoss, with a message); a sample that decodes once
// decodes again to the same bytes (no state leaks between images).
// Re-laying (core/decode/jpeg_relayout.h): RelayJpeg refuses with
// InvalidArgument or Unimplemented and a message, or makes a copy whose
// layout parses and from which the sample decodes to the same output as
// from the input; ParseRelaid of the input itself never crashes, and a
// rectangle cut from what it accepts decodes or fails with a documented
// error. An input with a restart marker after every MCU (the seeds
// restart*.jpg, some with corrupt intervals) is decoded by the transformer
// through the re-laid copies' own entropy decoder
// (core/decode/relaid_entropy_decoder.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/jpeg_relayout.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "core/engine/batch_layout.h"
#include "core/engine/collate.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/fuzz/two_sample_batch.h"

namespace conveyor::fuzz {
namespace {

bool DocumentedError(const absl::Status& st) {
  return (absl::IsInvalidArgument(st) || absl::IsDataLoss(st)) && !st.message().empty();
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  const uint64_t h = fuzz::HashBytes(data, size);
  const TransformSpec spec = fuzz::ImageSpecFor(h);
  FUZZ_CHECK(ValidateTransformSpec(spec).ok());
  const std::span<const uint8_t> bytes(data, size);

  // One transformer per worker thread in the engine; one here, reused.
  static SampleTransformer* transformer = new SampleTransformer();
  fuzz::CheckTwoSampleBatch(*transformer, bytes, spec, h, fuzz::DocumentedError);

  std::vector<uint8_t> want(SampleBytes(spec)), got(want.size());
  Rng rng_want = Rng::ForKeys(h, 1, 2);
  const absl::Status original = transformer->Run(bytes, spec, rng_want, want.data());
  absl::StatusOr<std::vector<uint8_t>> relaid = RelayJpeg(bytes);
  if (relaid.ok()) {
    FUZZ_CHECK(ParseRelaid(*relaid).ok());
    if (original.ok()) {
      Rng rng_got = Rng::ForKeys(h, 1, 2);
      FUZZ_CHECK(transformer->Run(*relaid, spec, rng_got, got.data()).ok());
      FUZZ_CHECK(got == want);
    }
  } else {
    FUZZ_CHECK(
        (absl::IsInvalidArgument(relaid.status()) || absl::IsUnimplemented(relaid.status())) &&
        !relaid.status().message().empty());
  }
  if (absl::StatusOr<RelaidLayout> layout = ParseRelaid(bytes); layout.ok()) {
    const int k = layout->interval_mcus;
    McuRect r;
    r.col0 = static_cast<int>(h % static_cast<uint64_t>(layout->intervals_per_row())) * k;
    r.col1 = std::min(layout->mcus_per_row, r.col0 + k);
    r.row0 = static_cast<int>((h >> 20) % static_cast<uint64_t>(layout->mcu_rows));
    r.row1 = r.row0 + 1;
    std::vector<uint8_t> part;
    FUZZ_CHECK(ExtractMcuRect(bytes, *layout, r, &part).ok());
    JpegDecoder decoder;
    RgbImage image;
    if (decoder.ReadHeader(part, spec.max_pixels).ok()) {
      const absl::Status st = decoder.DecodeImage(1, &image);
      FUZZ_CHECK(st.ok() || fuzz::DocumentedError(st));
    }
  }
  return 0;
}
