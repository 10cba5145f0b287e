// Collate's pure parts: compaction of a batch with failed samples and the
// failure policy's verdict.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "core/engine/collate.h"
#include "tests/unit/field_spec_of.h"

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

TEST_CASE("field areas are packed Arrow-style, the failed samples' values left out",
          "[collate][fields]") {
  TransformSpec spec;
  spec.output_height = spec.output_width = 2;
  const std::vector<SampleFieldSpec> fields = {
      testing::FieldSpecOf("caption", FieldType::kText, "txt", true, 6),
      testing::FieldSpecOf("meta", FieldType::kJson, "json", false, 3)};
  const BatchLayout l = BatchLayout::For(spec, 4, fields);
  REQUIRE(l.fields.size() == 2);
  CHECK(l.fields[0].offsets_offset >= l.indices_offset + 4 * sizeof(int64_t));
  CHECK(l.fields[1].offsets_offset >= l.fields[0].data_offset + 4 * 6);
  CHECK(l.slot_bytes == l.fields[1].data_offset + 4 * 3);
  std::vector<uint8_t> slot(l.slot_bytes, 0xEE);
  // What WriteFields leaves: value at position × stride, length at
  // offsets[position + 1], the present flag.
  auto put = [&](size_t f, uint32_t pos, const std::string& v, bool present) {
    const BatchLayout::FieldArea& a = l.fields[f];
    std::memcpy(slot.data() + a.data_offset + pos * a.stride, v.data(), v.size());
    const uint32_t len = static_cast<uint32_t>(v.size());
    std::memcpy(slot.data() + a.offsets_offset + 4 * (pos + 1), &len, 4);
    slot[a.present_offset + pos] = present ? 1 : 0;
  };
  const std::string captions[] = {"ab", "cdefgh", "", "xyz"};
  for (uint32_t i = 0; i < 4; ++i) put(0, i, captions[i], true);
  put(1, 0, "1", true);
  put(1, 1, "", false);
  put(1, 2, "[2]", true);
  put(1, 3, "{}", true);
  PackFieldAreas(l, slot.data(), std::vector<uint8_t>{0, 0, 1, 0});
  auto column = [&](size_t f, uint32_t n) {
    const BatchLayout::FieldArea& a = l.fields[f];
    std::vector<std::string> values;
    for (uint32_t i = 0; i < n; ++i) {
      uint32_t b, e;
      std::memcpy(&b, slot.data() + a.offsets_offset + 4 * i, 4);
      std::memcpy(&e, slot.data() + a.offsets_offset + 4 * (i + 1), 4);
      values.emplace_back(reinterpret_cast<const char*>(slot.data() + a.data_offset + b), e - b);
    }
    return values;
  };
  CHECK(column(0, 3) == std::vector<std::string>{"ab", "cdefgh", "xyz"});
  CHECK(column(1, 3) == std::vector<std::string>{"1", "", "{}"});
  const BatchLayout::FieldArea& meta = l.fields[1];
  CHECK(slot[meta.present_offset + 0] == 1);
  CHECK(slot[meta.present_offset + 1] == 0);
  CHECK(slot[meta.present_offset + 2] == 1);
  uint32_t first = 1;
  std::memcpy(&first, slot.data() + l.fields[0].offsets_offset, 4);
  CHECK(first == 0);

  // Every sample failed: an empty column.
  PackFieldAreas(l, slot.data(), std::vector<uint8_t>{1, 1, 1, 1});
  CHECK(column(0, 0).empty());
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
