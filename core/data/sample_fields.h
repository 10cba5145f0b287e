// Sample fields: what a pipeline delivers of each sample beside its decoded
// media — the bytes of another tar member of the sample (a caption `.txt`,
// metadata `.json`, anything as raw bytes) or the sample's key — and where a
// sample's parts lie in the bytes its source reads (SampleParts).
//
// A tar sample's fields are fetched with its image in one ranged read (the
// span covering its members, core/data/tar_dataset.h); SampleParts cuts that
// span into the image (what the decoder gets) and the members' values.
// Values are checked against their field's type and size limit
// (CheckFieldValue); a failed check, or a required field the sample lacks,
// is an error of that sample naming the field.
//
// Thread-safety: SampleFieldSpec is a plain value; SampleParts
// implementations are immutable and safe for concurrent use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "core/data/dataset_index.h"
#include "core/data/npy_array.h"

namespace conveyor {

enum class FieldType {
  kText,     // valid UTF-8
  kBytes,    // anything
  kJson,     // one JSON value (RFC 8259), as text
  kKey,      // the sample's key (tar key, or its path in the dataset); no member
  kNpy,      // a NumPy .npy array (core/data/npy_array.h), delivered as the .npy file
  kMask,     // a second image (a segmentation mask): its first channel, moved
             // nearest-neighbour with the image; output height × width uint8
  kAugment,  // what the sample's augmentation drew, as one JSON object
             // (SampleDecoder::LastDraws); no member; delivered as JSON
};

// "text", "bytes", "json", "key", "npy", "mask", "augment"
const char* ToString(FieldType type);
// Fields made by the daemon (key, augment), not read from a member or column.
inline bool ReadsNoMember(FieldType type) {
  return type == FieldType::kKey || type == FieldType::kAugment;
}

// An npy field whose values move with the image (core/decode/sample_geometry.h):
// boxes of 4 numbers, [N, 4], rewritten as float32 after the crop and flip.
enum class FieldGeometry { kNone, kBoxesXyxy, kBoxesXywh, kKeypoints };
// "none", "boxes_xyxy", "boxes_xywh", "keypoints"
const char* ToString(FieldGeometry g);

// Bounds on what a pipeline may declare.
inline constexpr size_t kMaxSampleFields = 32;
inline constexpr uint32_t kMaxFieldValueBytes = 16u << 20;
inline constexpr size_t kMaxFieldNameLength = 64;

struct SampleFieldSpec {
  std::string name;  // [A-Za-z_][A-Za-z0-9_]*, unique in the pipeline
  FieldType type = FieldType::kText;
  // Tar shards: the extension of the member that holds the value (lower
  // case, as the grouping compares it: "txt", "json", "seg.png"). Empty for
  // kKey.
  std::string member;
  // A sample without the member fails (an error of the sample naming the
  // field); optional: the value is absent (FieldColumn.present 0).
  bool required = true;
  // The largest value of one sample; larger ones fail their sample. A
  // batch's area for the field is batch_size × max_bytes (BatchLayout).
  uint32_t max_bytes = 4096;
  // kNpy: the element type every value must have ("float32", "int64", …;
  // NpyArray::dtype names), "" for any.
  std::string npy_dtype;
  // kNpy: boxes moved with the image, [N, 4 + k] (the k columns after the
  // box, e.g. its class, travel with it); `normalized`: the coordinates are
  // fractions of the image's width and height (in and out), else pixels.
  FieldGeometry geometry = FieldGeometry::kNone;
  bool normalized = false;
};

// InvalidArgument naming the bad spec ("fields[2] (caption): ..."), or OK:
// names valid and unique, members non-empty exactly when the type is not
// kKey and unique, 1 ≤ max_bytes ≤ kMaxFieldValueBytes, at most
// kMaxSampleFields.
absl::Status ValidateFieldSpecs(std::span<const SampleFieldSpec> fields);

// OK when `value` fits `spec` (size, UTF-8 for text, one JSON value for
// json, a .npy file of the declared element type for npy, [N, 4] of
// float32 or float64 for boxes); else InvalidArgument "field 'NAME': ..."
// saying what is wrong.
// An npy value's parsed array goes to *npy when given (so it is parsed once).
absl::Status CheckFieldValue(const SampleFieldSpec& spec, std::span<const uint8_t> value,
                             NpyArray* npy = nullptr);

// The numbers of a boxes field's array (checked by CheckFieldValue):
// float32 or float64 read as double, *columns (≥ 4) per box.
void ReadBoxes(const NpyArray& a, std::vector<double>* out, size_t* columns);

// Whether `text` is exactly one JSON value (RFC 8259: objects, arrays,
// strings with valid escapes and UTF-8, numbers, true/false/null; nesting at
// most kMaxJsonDepth), with optional whitespace around it.
inline constexpr int kMaxJsonDepth = 128;
bool IsValidJson(std::string_view text, std::string* why);

// Where a sample's parts lie in the bytes its source read for it.
class SampleParts {
 public:
  virtual ~SampleParts() = default;
  // The media's bytes (what the decoder gets) within `read`, the bytes the
  // pipeline's source returned for sample `index`.
  virtual std::span<const uint8_t> Media(uint64_t index, std::span<const uint8_t> read) const = 0;
  // The bytes within `read` of the sample's member `member` (a field's
  // SampleFieldSpec::member); nullopt when the sample has no such member.
  virtual std::optional<std::span<const uint8_t>> Member(uint64_t index, std::string_view member,
                                                         std::span<const uint8_t> read) const = 0;
  // Replaces *out with the sample's key.
  virtual void Key(uint64_t index, std::string* out) const = 0;
};

// The parts of a dataset read whole, one file per sample (folders, lists,
// URLs): the media is all of it, no member exists, and the key is the
// sample's path in `names` (the index samples are shown by: URLs without
// their secrets).
class WholeFileParts final : public SampleParts {
 public:
  explicit WholeFileParts(std::shared_ptr<const DatasetIndex> names) : names_(std::move(names)) {}
  std::span<const uint8_t> Media(uint64_t, std::span<const uint8_t> read) const override {
    return read;
  }
  std::optional<std::span<const uint8_t>> Member(uint64_t, std::string_view,
                                                 std::span<const uint8_t>) const override {
    return std::nullopt;
  }
  void Key(uint64_t index, std::string* out) const override;

 private:
  const std::shared_ptr<const DatasetIndex> names_;
};

}  // namespace conveyor
