// YamlFields: typed, checked reads of the fields of one YAML document, for
// conveyord's config schema (server/config/schema.h). Every read names the field
// and the line in its error: "FILE: field PATH: reason (line N)", where PATH
// is the dotted path the caller passes ("pipelines.imagenet.size[0]").
// Paths are resolved lexically against a base folder; nothing here touches
// the file system.
//
// Thread-safety: a YamlFields is immutable after construction and may be
// used from any thread; yaml-cpp nodes are not shared between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

// What a node holds, for messages: "'text'", "a list", "a map" or "nothing".
std::string DescribeNode(const YAML::Node& n);

// `p` made absolute against `base_dir` (when relative) and lexically
// normalised, without a trailing '/' (unless "/"). No file system access: ".."
// is folded by the text, symlinks are not looked at.
std::string ResolvePath(const std::string& base_dir, const std::string& p);

class YamlFields {
 public:
  // `file` names the document in messages; relative paths resolve against
  // `base_dir` (absolute).
  YamlFields(std::string file, std::string base_dir)
      : file_(std::move(file)), base_dir_(std::move(base_dir)) {}

  const std::string& file() const { return file_; }
  const std::string& base_dir() const { return base_dir_; }

  // InvalidArgument "FILE: field FIELD: WHY (line N)" (no line for an
  // undefined node).
  absl::Status Error(const std::string& field, const YAML::Node& n, const std::string& why) const;

  // `field.key`, or `key` at the top.
  static std::string Join(const std::string& field, const std::string& key);

  // `n` must be a map whose keys are all in `allowed`, each at most once.
  absl::Status CheckMap(const YAML::Node& n, const std::string& field,
                        const std::vector<std::string>& allowed) const;

  // `n` must be a scalar ("expected EXPECTED, got ...").
  absl::Status Scalar(const YAML::Node& n, const std::string& field,
                      const std::string& expected) const;

  // An integer within [lo, hi] (no sign, no fraction).
  absl::Status ReadUint(const YAML::Node& n, const std::string& field, uint64_t lo, uint64_t hi,
                        uint64_t* out) const;
  template <typename T>
  absl::Status ReadUintAs(const YAML::Node& n, const std::string& field, uint64_t lo, uint64_t hi,
                          T* out) const {
    uint64_t v = 0;
    if (absl::Status st = ReadUint(n, field, lo, hi, &v); !st.ok()) return st;
    *out = static_cast<T>(v);
    return absl::OkStatus();
  }

  // A finite number within [lo, hi].
  absl::Status ReadDouble(const YAML::Node& n, const std::string& field, double lo, double hi,
                          double* out) const;
  // true/yes/on or false/no/off (case-insensitive).
  absl::Status ReadBool(const YAML::Node& n, const std::string& field, bool* out) const;
  absl::Status ReadString(const YAML::Node& n, const std::string& field, std::string* out) const;
  // One of `names` (lower case; the value is matched case-insensitively);
  // *out is its index.
  absl::Status ReadEnum(const YAML::Node& n, const std::string& field,
                        const std::vector<std::string>& names, int* out) const;
  // A byte size (server/config/byte_size.h) of at least `lo` bytes. With
  // `percent_of` > 0, "N%" is also accepted: N percent of `percent_of`.
  absl::Status ReadSize(const YAML::Node& n, const std::string& field, uint64_t lo,
                        uint64_t percent_of, uint64_t* out) const;
  // A list of exactly `count` numbers within [lo, hi].
  absl::Status ReadNumbers(const YAML::Node& n, const std::string& field, size_t count, double lo,
                           double hi, std::vector<double>* out) const;
  // A non-empty path, resolved by ResolvePath against the base folder.
  absl::Status ReadPath(const YAML::Node& n, const std::string& field, std::string* out) const;

 private:
  const std::string file_;
  const std::string base_dir_;
};

}  // namespace conveyor::server
