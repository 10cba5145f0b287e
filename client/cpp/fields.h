// Sample fields of a batch (Batch.fields of proto/conveyor/v1/conveyor.proto):
// what each sample carries beside its media (a caption, JSON metadata, raw
// bytes, the sample's key), as the C++ client and the C ABI hand it out,
// and the checks a batch's columns pass when the batch arrives.
//
// A column is Arrow-style: sample i's value is data[offsets[i],
// offsets[i + 1]), present[i] says whether the sample has the field (an
// absent value is empty). ParseFields checks every column of a batch before
// anything reads it, with the rules of the Python client
// (client/python/conveyor/_fields.py):
//   - offsets are exactly 4 * (num_samples + 1) bytes of little-endian
//     uint32, start at 0, never decrease and end at the size of data;
//   - present is exactly num_samples bytes, each 0 or 1, and an absent
//     sample's value is empty;
//   - a known type (text, bytes, json, key); a non-empty name, unique in the
//     batch (and without a NUL byte: the C ABI hands names out as C strings);
//   - the columns are the pipeline's declared fields (PipelineInfo.fields),
//     same names, types and order; a batch of no samples may carry none (it
//     then gets empty columns of the declared fields).
// Anything else is INTERNAL "protocol error: batch N: field "NAME": ..."
// naming the field and what is wrong, so indexing a Field never reads
// outside its bytes. Values are not decoded: text is UTF-8 and JSON parses
// because the daemon checked them; the client hands out the bytes.
//
// A Field owns its column (moved out of the batch message): offsets decoded
// to host order (4-byte aligned), data and present as they came. It is
// immutable, so any number of threads may read one at once; pointers and
// views it gives stay valid as long as the Field itself (a BatchLease keeps
// its fields in one heap block, so moving the lease moves no Field).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "conveyor/v1/conveyor.pb.h"

namespace conveyor::client {

class Field {
 public:
  // A checked column of a batch of `num_samples` samples, or the protocol
  // error naming the field (`where`, e.g. "batch 7", prefixes it). Checks
  // one column only; ParseFields checks a batch's columns together.
  static absl::StatusOr<Field> Parse(v1::FieldColumn column, uint32_t num_samples,
                                     absl::string_view where);

  const std::string& name() const { return column_.name(); }
  v1::FieldType type() const { return column_.type(); }
  // Values: one per sample of the batch (0 for a moved-from Field).
  size_t size() const { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  // Sample i's value, empty where it is absent. REQUIRES i < size() (else
  // "" and false: never a read outside the column).
  std::string_view value(size_t i) const {
    return i < size() ? std::string_view(column_.data().data() + offsets_[i],
                                         offsets_[i + 1] - offsets_[i])
                      : std::string_view();
  }
  bool present(size_t i) const { return i < size() && column_.present()[i] != 0; }

  // The column as it came, for readers that want no object per value:
  // size() + 1 offsets (offsets[0] == 0, offsets[size()] == data().size()),
  // the concatenated values, and size() flags of 0 or 1.
  std::span<const uint32_t> offsets() const { return offsets_; }
  std::string_view data() const { return column_.data(); }
  std::span<const uint8_t> present_flags() const {
    return {reinterpret_cast<const uint8_t*>(column_.present().data()), column_.present().size()};
  }

 private:
  Field() = default;
  v1::FieldColumn column_;         // name, type, data, present (offsets cleared)
  std::vector<uint32_t> offsets_;  // size() + 1, host order
};

// "text", "bytes", "json", "key"; "unknown" for anything else.
std::string_view FieldTypeName(v1::FieldType type);

// The fields of a batch of `num_samples` samples from its columns (moved
// out of the Batch message), checked as described above against
// `declared`, the pipeline's fields (StreamOpened.pipeline.fields), in
// their order. `where` ("batch 7") prefixes the error messages.
absl::StatusOr<std::vector<Field>> ParseFields(
    google::protobuf::RepeatedPtrField<v1::FieldColumn> columns, uint32_t num_samples,
    const google::protobuf::RepeatedPtrField<v1::FieldInfo>& declared, absl::string_view where);

// The field called `name`, or nullptr.
const Field* FindField(std::span<const Field> fields, std::string_view name);

}  // namespace conveyor::client
