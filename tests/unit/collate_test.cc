// Collate's pure parts: compaction of a batch with failed samples and the
// failure policy's verdict.
#include <catch2/catch.hpp>

#include "core/engine/collate.h"

namespace conveyor {
namespace {

TEST_CASE("compaction moves survivors together in order, labels and indices with them",
          "[collate]") {
  TransformSpec spec;
  spec.output_height = spec.output_width = 2;  // 12 bytes per sample (uint8 RGB)
  const BatchLayout l = BatchLayout::For(spec, 5);
  std::vector<uint8_t> slot(l.slot_bytes, 0);
  auto* labels = reinterpret_cast<int64_t*>(slot.data() + l.labels_offset);
  auto* indices = reinterpret_cast<int64_t*>(slot.data() + l.indices_offset);
  for (uint32_t i = 0; i < 5; ++i) {
    std::fill_n(slot.data() + l.images_offset + i * l.sample_bytes, l.sample_bytes,
                static_cast<uint8_t>(10 + i));
    labels[i] = 100 + i;
    indices[i] = 1000 + i;
  }
  const std::vector<uint8_t> failed = {1, 0, 1, 0, 0};
  REQUIRE(CompactSamples(l, slot.data(), failed) == 3);
  const int want[] = {1, 3, 4};
  for (int k = 0; k < 3; ++k) {
    const uint8_t* img = slot.data() + l.images_offset + k * l.sample_bytes;
    CHECK(std::all_of(img, img + l.sample_bytes, [&](uint8_t v) { return v == 10 + want[k]; }));
    CHECK(labels[k] == 100 + want[k]);
    CHECK(indices[k] == 1000 + want[k]);
  }
  CHECK(CompactSamples(l, slot.data(), std::vector<uint8_t>{1, 1, 1, 1, 1}) == 0);
}

TEST_CASE("the failure policy: fail_fast at once, skip above the rate after the minimum",
          "[collate]") {
  PipelineConfig p;
  p.name = "p";
  SampleFailure f{7, "a/b.jpg", "not a JPEG"};
  p.error_policy = ErrorPolicy::kFailFast;
  absl::Status st = ApplyFailurePolicy(p, 1000, 1, f);
  CHECK(absl::IsDataLoss(st));
  CHECK(std::string(st.message()).find("a/b.jpg") != std::string::npos);

  p.error_policy = ErrorPolicy::kSkip;
  p.max_failure_rate = 0.1;
  p.failure_rate_min_samples = 100;
  CHECK(ApplyFailurePolicy(p, 50, 40, f).ok());   // too few samples to judge
  CHECK(ApplyFailurePolicy(p, 100, 10, f).ok());  // at the rate, not above
  st = ApplyFailurePolicy(p, 100, 11, f);
  CHECK(absl::IsDataLoss(st));
  CHECK(std::string(st.message()).find("max_failure_rate") != std::string::npos);
}

}  // namespace
}  // namespace conveyor
