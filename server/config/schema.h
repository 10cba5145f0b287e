// Schema: conveyord's config fields, each declared once. A Section lists the
// fields of one YAML map as FieldSpecs: the key, its type and bounds as the
// reference writes them, its default, one line of doc, and the binder that
// reads the YAML value into the struct the section fills (through
// YamlFields, which names the field and line in every error). From that one
// table come the section's allowed keys (an unknown key is refused listing
// them), the reads of its plain fields, and the rows of config/README.md's
// field tables (server/config/config_doc.h; a unit test fails when the
// README and the schema differ). Fields that depend on others (sub-sections,
// mutually exclusive keys, defaults computed from other fields) are still
// declared here for their key and doc, and read by the section's parser.
//
// Defaults shown in the docs are taken from a default-constructed struct, so
// they cannot drift from the code; a field whose default is computed gives
// its text explicitly.
//
// Thread-safety: a Section is immutable once built; the config's sections
// are function-local statics (built once, thread-safe initialisation) shared
// by every parse.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/config/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

// One row of a field table: `field` is the dotted path below the table's
// root ("listen.tls.cert", "audio.channels", "access.tokens[i].name").
struct FieldDoc {
  std::string field;
  std::string type;           // "integer 1–4096", "size ≥ 1MiB", "`a` \| `b`", "path", ...
  std::string default_value;  // "`64MiB`", "none", "required", ...
  std::string doc;            // one line
  bool operator==(const FieldDoc&) const = default;
};

// How the type column writes bounds: integers in full, except powers of two
// of 2^32 and more ("2^40"); numbers without trailing zeros ("0.001",
// "1e-9"; "1e6" for powers of ten from 10^6); byte sizes with the largest
// exact binary unit ("64MiB", "1B").
std::string FormatUintBound(uint64_t v);
std::string FormatNumberBound(double v);
std::string FormatSizeBound(uint64_t bytes);
std::string UintType(uint64_t lo, uint64_t hi);  // "integer LO–HI"
std::string NumberType(double lo, double hi);    // "number LO–HI"
// "size", "size ≥ LO"; with `percent`, " or `N%`" after it.
std::string SizeType(uint64_t lo, bool percent);
// "`v`" (a default as the reference writes it), or "none" for "".
std::string Quoted(const std::string& v);

// One field of a section filling a `T`.
template <typename T>
struct FieldSpec {
  using Reader = std::function<absl::Status(const YamlFields& y, const YAML::Node& n,
                                            const std::string& field, T* out)>;
  std::string key;
  std::string type;
  std::string default_value;
  std::string doc;
  // Reads the present node `n` (the value of `key`; `field` its dotted path)
  // into `out`. Null: the section's parser reads the key itself.
  Reader read;
  // "": read by Section::ReadFields. Otherwise only by ReadGroup/ReadOne,
  // which the section's parser calls when the group applies ("video": for
  // kind video; "manual": read in an order of the parser's own).
  std::string group;
  // A sub-section's rows, their fields relative to `key` + `sub_separator`.
  std::vector<FieldDoc> sub_rows;
  std::string sub_separator = ".";
  bool own_row = true;  // whether `key` itself has a row

  FieldSpec WithDefault(std::string text) const {
    FieldSpec f = *this;
    f.default_value = std::move(text);
    return f;
  }
  FieldSpec WithType(std::string text) const {
    FieldSpec f = *this;
    f.type = std::move(text);
    return f;
  }
  FieldSpec InGroup(std::string g) const {
    FieldSpec f = *this;
    f.group = std::move(g);
    return f;
  }
  // After a successful read, `check(*out)`; its error is reported on the
  // field ("FILE: field F: <message> (line N)").
  FieldSpec WithCheck(std::function<absl::Status(const T&)> check) const {
    FieldSpec f = *this;
    Reader inner = f.read;
    f.read = [inner, check](const YamlFields& y, const YAML::Node& n, const std::string& field,
                            T* out) -> absl::Status {
      if (absl::Status st = inner(y, n, field, out); !st.ok()) return st;
      if (absl::Status st = check(*out); !st.ok()) {
        return y.Error(field, n, std::string(st.message()));
      }
      return absl::OkStatus();
    };
    return f;
  }
  // A key whose value is a map of its own: rows of `rows`, no row of its
  // own, read by the section's parser.
  FieldSpec WithSubRows(std::vector<FieldDoc> rows, bool own = false,
                        std::string separator = ".") const {
    FieldSpec f = *this;
    f.sub_rows = std::move(rows);
    f.own_row = own;
    f.sub_separator = std::move(separator);
    return f;
  }
};

template <typename T>
class Section {
 public:
  explicit Section(std::vector<FieldSpec<T>> fields) : fields_(std::move(fields)) {
    for (const FieldSpec<T>& f : fields_) keys_.push_back(f.key);
  }

  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<FieldSpec<T>>& fields() const { return fields_; }

  // `n` must be a map of this section's keys (and of `extra` ones), each at
  // most once: "FILE: field F.K: unknown field (known: ...)" otherwise.
  absl::Status CheckKeys(const YamlFields& y, const YAML::Node& n, const std::string& field,
                         const std::vector<std::string>& extra = {}) const {
    if (extra.empty()) return y.CheckMap(n, field, keys_);
    std::vector<std::string> all = keys_;
    all.insert(all.end(), extra.begin(), extra.end());
    return y.CheckMap(n, field, all);
  }

  // Reads, in declaration order, every present field of `group` that has a
  // reader.
  absl::Status ReadGroup(const YamlFields& y, const YAML::Node& n, const std::string& field,
                         const std::string& group, T* out) const {
    for (const FieldSpec<T>& f : fields_) {
      if (f.group != group || !f.read) continue;
      const YAML::Node v = n[f.key];
      if (!v) continue;
      if (absl::Status st = f.read(y, v, YamlFields::Join(field, f.key), out); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }
  absl::Status ReadFields(const YamlFields& y, const YAML::Node& n, const std::string& field,
                          T* out) const {
    return ReadGroup(y, n, field, "", out);
  }
  // CheckKeys, then ReadFields.
  absl::Status Read(const YamlFields& y, const YAML::Node& n, const std::string& field,
                    T* out) const {
    if (absl::Status st = CheckKeys(y, n, field); !st.ok()) return st;
    return ReadFields(y, n, field, out);
  }

  // Reads `key` (declared with a reader) when it is present in `n`.
  absl::Status ReadOne(const YamlFields& y, const YAML::Node& n, const std::string& field,
                       const std::string& key, T* out) const {
    for (const FieldSpec<T>& f : fields_) {
      if (f.key != key || !f.read) continue;
      const YAML::Node v = n[key];
      if (!v) return absl::OkStatus();
      return f.read(y, v, YamlFields::Join(field, key), out);
    }
    return absl::InternalError(absl::StrCat("config schema: no reader for ", field, ".", key));
  }

  // The first present key of `group` is refused: "FILE: field F.K: WHY".
  absl::Status RefuseGroup(const YamlFields& y, const YAML::Node& n, const std::string& field,
                           const std::string& group, const std::string& why) const {
    for (const FieldSpec<T>& f : fields_) {
      if (f.group == group && n[f.key]) {
        return y.Error(YamlFields::Join(field, f.key), n[f.key], why);
      }
    }
    return absl::OkStatus();
  }

  // The section's rows, sub-sections expanded, fields relative to the section.
  std::vector<FieldDoc> Docs() const {
    std::vector<FieldDoc> rows;
    for (const FieldSpec<T>& f : fields_) {
      if (f.own_row) rows.push_back({f.key, f.type, f.default_value, f.doc});
      for (const FieldDoc& r : f.sub_rows) {
        rows.push_back({f.key + f.sub_separator + r.field, r.type, r.default_value, r.doc});
      }
    }
    return rows;
  }

 private:
  std::vector<FieldSpec<T>> fields_;
  std::vector<std::string> keys_;
};

// Builders of the common kinds of field. `get` maps a T& to the member the
// field fills (a member pointer or a lambda returning a reference); the
// default shown is that member of a default-constructed T.
namespace schema {

template <typename T, typename Get>
auto& Member(T& t, Get get) {
  return std::invoke(get, t);
}

template <typename T, typename Get>
FieldSpec<T> Uint(std::string key, Get get, uint64_t lo, uint64_t hi, std::string doc) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = UintType(lo, hi);
  f.default_value = Quoted(absl::StrCat(Member(d, get)));
  f.doc = std::move(doc);
  f.read = [get, lo, hi](const YamlFields& y, const YAML::Node& n, const std::string& field,
                         T* out) { return y.ReadUintAs(n, field, lo, hi, &Member(*out, get)); };
  return f;
}

template <typename T, typename Get>
FieldSpec<T> Number(std::string key, Get get, double lo, double hi, std::string doc) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = NumberType(lo, hi);
  f.default_value = Quoted(FormatNumberBound(Member(d, get)));
  f.doc = std::move(doc);
  f.read = [get, lo, hi](const YamlFields& y, const YAML::Node& n, const std::string& field,
                         T* out) { return y.ReadDouble(n, field, lo, hi, &Member(*out, get)); };
  return f;
}

template <typename T, typename Get>
FieldSpec<T> Bool(std::string key, Get get, std::string doc) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = "bool";
  f.default_value = Quoted(Member(d, get) ? "true" : "false");
  f.doc = std::move(doc);
  f.read = [get](const YamlFields& y, const YAML::Node& n, const std::string& field, T* out) {
    return y.ReadBool(n, field, &Member(*out, get));
  };
  return f;
}

template <typename T, typename Get>
FieldSpec<T> String(std::string key, Get get, std::string doc) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = "string";
  f.default_value = Quoted(Member(d, get));
  f.doc = std::move(doc);
  f.read = [get](const YamlFields& y, const YAML::Node& n, const std::string& field, T* out) {
    return y.ReadString(n, field, &Member(*out, get));
  };
  return f;
}

// A path resolved against the config's folder (YamlFields::ReadPath).
template <typename T, typename Get>
FieldSpec<T> Path(std::string key, Get get, std::string doc) {
  FieldSpec<T> f = String<T>(std::move(key), get, std::move(doc));
  f.type = "path";
  f.read = [get](const YamlFields& y, const YAML::Node& n, const std::string& field, T* out) {
    return y.ReadPath(n, field, &Member(*out, get));
  };
  return f;
}

// A byte size of at least `lo` (server/config/byte_size.h). With `percent_of`
// (T -> bytes), "N%" of that too.
template <typename T, typename Get>
FieldSpec<T> Size(std::string key, Get get, uint64_t lo, std::string doc,
                  std::function<uint64_t(const T&)> percent_of = nullptr) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = SizeType(lo, percent_of != nullptr);
  f.default_value = Quoted(FormatSizeBound(Member(d, get)));
  f.doc = std::move(doc);
  f.read = [get, lo, percent_of](const YamlFields& y, const YAML::Node& n, const std::string& field,
                                 T* out) {
    const uint64_t whole = percent_of ? percent_of(*out) : 0;
    return y.ReadSize(n, field, lo, whole, &Member(*out, get));
  };
  return f;
}

// One of `choices` (names matched case-insensitively); a name whose value
// repeats the one before it is an alias, written "(`alias`)" in the type.
template <typename T, typename Get, typename E>
FieldSpec<T> Enum(std::string key, Get get, std::vector<std::pair<std::string, E>> choices,
                  std::string doc) {
  T d{};
  FieldSpec<T> f;
  f.key = std::move(key);
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0 && choices[i].second == choices[i - 1].second) {
      absl::StrAppend(&f.type, " (`", choices[i].first, "`)");
    } else {
      absl::StrAppend(&f.type, i > 0 ? " \\| " : "", "`", choices[i].first, "`");
    }
  }
  for (const auto& [name, value] : choices) {
    if (value == Member(d, get)) {
      f.default_value = Quoted(name);
      break;
    }
  }
  f.doc = std::move(doc);
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(c.first);
  f.read = [get, choices, names](const YamlFields& y, const YAML::Node& n, const std::string& field,
                                 T* out) -> absl::Status {
    int i = 0;
    if (absl::Status st = y.ReadEnum(n, field, names, &i); !st.ok()) return st;
    Member(*out, get) = choices[static_cast<size_t>(i)].second;
    return absl::OkStatus();
  };
  return f;
}

// A key read by the section's parser: only its type, default and doc here.
template <typename T>
FieldSpec<T> Manual(std::string key, std::string type, std::string default_value, std::string doc) {
  FieldSpec<T> f;
  f.key = std::move(key);
  f.type = std::move(type);
  f.default_value = std::move(default_value);
  f.doc = std::move(doc);
  return f;
}

// A key whose reader the caller writes (custom syntax).
template <typename T>
FieldSpec<T> Custom(std::string key, std::string type, std::string default_value, std::string doc,
                    typename FieldSpec<T>::Reader read) {
  FieldSpec<T> f =
      Manual<T>(std::move(key), std::move(type), std::move(default_value), std::move(doc));
  f.read = std::move(read);
  return f;
}

}  // namespace schema
}  // namespace conveyor::server
