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
#include <algorithm>
#include <cstring>
#include <memory>
#include <span>
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
  return 0;
}
