#include "server/config/yaml_fields.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "server/config/byte_size.h"

namespace conveyor::server {

std::string DescribeNode(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return "nothing";
    case YAML::NodeType::Scalar: return absl::StrCat("'", n.Scalar(), "'");
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
  }
  return "?";
}

std::string ResolvePath(const std::string& base_dir, const std::string& p) {
  std::filesystem::path path(p);
  if (path.is_relative()) path = std::filesystem::path(base_dir) / path;
  std::string s = path.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

absl::Status YamlFields::Error(const std::string& field, const YAML::Node& n,
                               const std::string& why) const {
  std::string where;
  if (n.IsDefined() && n.Mark().line >= 0) where = absl::StrCat(" (line ", n.Mark().line + 1, ")");
  return absl::InvalidArgumentError(absl::StrCat(file_, ": field ", field, ": ", why, where));
}

std::string YamlFields::Join(const std::string& field, const std::string& key) {
  return field.empty() ? key : absl::StrCat(field, ".", key);
}

absl::Status YamlFields::CheckMap(const YAML::Node& n, const std::string& field,
                                  const std::vector<std::string>& allowed) const {
  if (!n.IsMap()) return Error(field, n, absl::StrCat("expected a map, got ", DescribeNode(n)));
  std::set<std::string> seen;
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return Error(field, kv.first, "keys must be plain names");
    const std::string key = kv.first.Scalar();
    const std::string sub = Join(field, key);
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Error(sub, kv.first,
                   absl::StrCat("unknown field (known: ", absl::StrJoin(allowed, ", "), ")"));
    }
    if (!seen.insert(key).second) return Error(sub, kv.first, "given twice");
  }
  return absl::OkStatus();
}

absl::Status YamlFields::Scalar(const YAML::Node& n, const std::string& field,
                                const std::string& expected) const {
  if (!n.IsScalar()) {
    return Error(field, n, absl::StrCat("expected ", expected, ", got ", DescribeNode(n)));
  }
  return absl::OkStatus();
}

absl::Status YamlFields::ReadUint(const YAML::Node& n, const std::string& field, uint64_t lo,
                                  uint64_t hi, uint64_t* out) const {
  RETURN_IF_ERROR(Scalar(n, field, "an integer"));
  const std::string s(absl::StripAsciiWhitespace(n.Scalar()));
  uint64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || absl::StartsWith(s, "+")) {
    int64_t neg = 0;
    if (absl::SimpleAtoi(s, &neg) && neg < 0) {
      return Error(field, n, absl::StrCat("must not be negative, got ", s));
    }
    return Error(field, n, absl::StrCat("expected an integer, got ", DescribeNode(n)));
  }
  if (v < lo || v > hi) {
    return Error(field, n, absl::StrCat("must be within [", lo, ", ", hi, "], got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status YamlFields::ReadDouble(const YAML::Node& n, const std::string& field, double lo,
                                    double hi, double* out) const {
  RETURN_IF_ERROR(Scalar(n, field, "a number"));
  const std::string s(absl::StripAsciiWhitespace(n.Scalar()));
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v)) {
    return Error(field, n, absl::StrCat("expected a number, got ", DescribeNode(n)));
  }
  if (v < lo || v > hi) {
    return Error(field, n, absl::StrFormat("must be within [%g, %g], got %g", lo, hi, v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status YamlFields::ReadBool(const YAML::Node& n, const std::string& field, bool* out) const {
  RETURN_IF_ERROR(Scalar(n, field, "true or false"));
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(n.Scalar()));
  if (s == "true" || s == "yes" || s == "on") {
    *out = true;
  } else if (s == "false" || s == "no" || s == "off") {
    *out = false;
  } else {
    return Error(field, n, absl::StrCat("expected true or false, got ", DescribeNode(n)));
  }
  return absl::OkStatus();
}

absl::Status YamlFields::ReadString(const YAML::Node& n, const std::string& field,
                                    std::string* out) const {
  RETURN_IF_ERROR(Scalar(n, field, "a string"));
  *out = n.Scalar();
  return absl::OkStatus();
}

absl::Status YamlFields::ReadEnum(const YAML::Node& n, const std::string& field,
                                  const std::vector<std::string>& names, int* out) const {
  RETURN_IF_ERROR(Scalar(n, field, absl::StrCat("one of ", absl::StrJoin(names, ", "))));
  const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(n.Scalar()));
  for (size_t i = 0; i < names.size(); ++i) {
    if (s == names[i]) {
      *out = static_cast<int>(i);
      return absl::OkStatus();
    }
  }
  return Error(
      field, n,
      absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ", DescribeNode(n)));
}

absl::Status YamlFields::ReadSize(const YAML::Node& n, const std::string& field, uint64_t lo,
                                  uint64_t percent_of, uint64_t* out) const {
  RETURN_IF_ERROR(Scalar(n, field, "a size such as 2GiB"));
  absl::StatusOr<uint64_t> v =
      percent_of > 0 ? ParseByteSizeOrPercent(n.Scalar(), percent_of) : ParseByteSize(n.Scalar());
  if (!v.ok()) return Error(field, n, std::string(v.status().message()));
  if (*v < lo) {
    return Error(field, n, absl::StrCat("must be at least ", lo, " bytes, got ", n.Scalar()));
  }
  *out = *v;
  return absl::OkStatus();
}

absl::Status YamlFields::ReadNumbers(const YAML::Node& n, const std::string& field, size_t count,
                                     double lo, double hi, std::vector<double>* out) const {
  if (!n.IsSequence() || n.size() != count) {
    return Error(field, n,
                 absl::StrCat("expected a list of ", count, " numbers, got ",
                              n.IsSequence() ? absl::StrCat(n.size(), " items") : DescribeNode(n)));
  }
  out->clear();
  for (size_t i = 0; i < count; ++i) {
    double v = 0;
    RETURN_IF_ERROR(ReadDouble(n[i], absl::StrCat(field, "[", i, "]"), lo, hi, &v));
    out->push_back(v);
  }
  return absl::OkStatus();
}

absl::Status YamlFields::ReadPath(const YAML::Node& n, const std::string& field,
                                  std::string* out) const {
  std::string s;
  RETURN_IF_ERROR(ReadString(n, field, &s));
  if (s.empty()) return Error(field, n, "must not be empty");
  if (s.find('\0') != std::string::npos) return Error(field, n, "contains a NUL byte");
  *out = ResolvePath(base_dir_, s);
  return absl::OkStatus();
}

}  // namespace conveyor::server
