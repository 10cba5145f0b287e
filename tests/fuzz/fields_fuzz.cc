// Fuzz target: sample field values (core/data/sample_fields.h) and the batch
// slot's field areas (core/engine/batch_layout.h, collate.h). Byte 0 picks:
//   even: the rest is a JSON text for IsValidJson and CheckFieldValue;
//   odd:  the rest describes a batch (byte 1: batch size 1–16, byte 2: the
//         stride 1–64, then per position a failed flag, a present flag, a
//         length and that many value bytes) written into one field area as
//         WriteFields does, then packed by PackFieldAreas.
// Properties: the JSON check repeats, says why it refuses, and agrees with
// itself on the text inside an array (unless that nests too deep); the
// packed column holds exactly the surviving samples' values in order, its
// offsets start at 0 and never decrease, and nothing outside the area is
// written.
#include <cstring>
#include <string>
#include <vector>

#include "core/data/sample_fields.h"
#include "core/engine/batch_layout.h"
#include "core/engine/collate.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/unit/field_spec_of.h"

namespace {

using namespace conveyor;

void Json(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::string why;
  const bool valid = IsValidJson(text, &why);
  FUZZ_CHECK(valid == IsValidJson(text, nullptr));
  FUZZ_CHECK(valid || !why.empty());
  std::string inner_why;
  const bool wrapped = IsValidJson("[" + text + "]", &inner_why);
  if (valid) FUZZ_CHECK(wrapped || inner_why.find("nested") != std::string::npos);
  SampleFieldSpec spec = testing::FieldSpecOf("f", FieldType::kJson, "json", true, 64);
  const absl::Status st = CheckFieldValue(spec, std::span<const uint8_t>(data, size));
  FUZZ_CHECK(st.ok() == (valid && size <= 64));
}

void Pack(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const uint32_t batch = 1 + data[0] % 16;
  const uint32_t stride = 1 + data[1] % 64;
  size_t at = 2;
  TransformSpec spec;
  spec.output_height = spec.output_width = 1;
  const std::vector<SampleFieldSpec> fields = {
      testing::FieldSpecOf("f", FieldType::kBytes, "bin", false, stride)};
  const BatchLayout l = BatchLayout::For(spec, batch, fields);
  const BatchLayout::FieldArea& a = l.fields[0];
  // Guard bytes after the slot: nothing may write them.
  std::vector<uint8_t> slot(l.slot_bytes + 64, 0xA5);
  std::vector<uint8_t> failed(batch, 0);
  std::vector<std::string> want;
  std::vector<uint8_t> want_present;
  for (uint32_t p = 0; p < batch; ++p) {
    const uint8_t flags = at < size ? data[at++] : 0;
    failed[p] = flags & 1;
    const bool present = (flags & 2) != 0;
    uint32_t length = at < size ? data[at++] % (stride + 1) : 0;
    length = static_cast<uint32_t>(std::min<size_t>(length, size - std::min(at, size)));
    if (!present) length = 0;
    std::memcpy(slot.data() + a.data_offset + size_t{p} * stride, data + at, length);
    at += length;
    std::memcpy(slot.data() + a.offsets_offset + 4 * (size_t{p} + 1), &length, 4);
    slot[a.present_offset + p] = present ? 1 : 0;
    if (!failed[p]) {
      want.emplace_back(reinterpret_cast<const char*>(data + at - length), length);
      want_present.push_back(present ? 1 : 0);
    }
  }
  PackFieldAreas(l, slot.data(), failed);
  uint32_t previous = 0;
  std::memcpy(&previous, slot.data() + a.offsets_offset, 4);
  FUZZ_CHECK(previous == 0);
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t end = 0;
    std::memcpy(&end, slot.data() + a.offsets_offset + 4 * (i + 1), 4);
    FUZZ_CHECK(end >= previous && end <= size_t{batch} * stride);
    FUZZ_CHECK(std::string(reinterpret_cast<const char*>(slot.data() + a.data_offset + previous),
                           end - previous) == want[i]);
    FUZZ_CHECK(slot[a.present_offset + i] == want_present[i]);
    previous = end;
  }
  for (size_t i = l.slot_bytes; i < slot.size(); ++i) FUZZ_CHECK(slot[i] == 0xA5);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    Json(data + 1, size - 1);
  } else {
    Pack(data + 1, size - 1);
  }
  return 0;
}
