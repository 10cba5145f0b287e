#include "client/cpp/fields.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/cpp/transport/client_transport.h"
#include "core/base/text_escape.h"

namespace conveyor::client {
namespace {

// `name` quoted for a message: escaped, capped.
std::string Quoted(absl::string_view name) {
  return absl::StrCat("\"", EscapeText(name, kClientStringCap), "\"");
}

std::string Prefix(absl::string_view where) {
  return where.empty() ? std::string() : absl::StrCat(where, ": ");
}

bool KnownType(int type) {
  return type == v1::FIELD_TEXT || type == v1::FIELD_BYTES || type == v1::FIELD_JSON ||
         type == v1::FIELD_KEY || type == v1::FIELD_NPY || type == v1::FIELD_MASK;
}

uint32_t LoadLe32(const std::string& bytes, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + 4 * i;
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

// "[caption (text), key (key)]", "(none)" when empty.
template <typename Items>
std::string Describe(const Items& items) {
  if (items.empty()) return "(none)";
  std::string out = "[";
  for (const auto& [name, type] : items) {
    if (out.size() > 1) out += ", ";
    absl::StrAppend(&out, EscapeText(name, kClientStringCap), " (", type, ")");
  }
  return out + "]";
}

std::string TypeText(int type) {
  return KnownType(type) ? std::string(FieldTypeName(static_cast<v1::FieldType>(type)))
                         : absl::StrCat("type ", type);
}

}  // namespace

std::string_view FieldTypeName(v1::FieldType type) {
  switch (type) {
    case v1::FIELD_TEXT: return "text";
    case v1::FIELD_BYTES: return "bytes";
    case v1::FIELD_JSON: return "json";
    case v1::FIELD_KEY: return "key";
    case v1::FIELD_NPY: return "npy";
    case v1::FIELD_MASK: return "mask";
    default: return "unknown";
  }
}

absl::StatusOr<Field> Field::Parse(v1::FieldColumn column, uint32_t num_samples,
                                   absl::string_view where) {
  const uint64_t n = num_samples;
  auto bad = [&](absl::string_view why) {
    return ProtocolError(absl::StrCat(Prefix(where), "field ", Quoted(column.name()), ": ", why));
  };
  const int type = static_cast<int>(column.type());
  if (!KnownType(type)) {
    return bad(absl::StrCat("unknown type ", type, " (this client knows bytes, json, key, text)"));
  }
  const std::string& raw = column.offsets();
  if (raw.size() != 4 * (n + 1)) {
    return bad(absl::StrCat(raw.size(), " bytes of offsets for ", n, " samples (", 4 * (n + 1),
                            " expected: ", n + 1, " uint32)"));
  }
  const std::string& present = column.present();
  if (present.size() != n) {
    return bad(absl::StrCat(present.size(), " bytes of present for ", n, " samples"));
  }
  Field field;
  field.offsets_.resize(n + 1);
  for (uint64_t i = 0; i <= n; ++i) field.offsets_[i] = LoadLe32(raw, i);
  const std::vector<uint32_t>& offsets = field.offsets_;
  if (offsets[0] != 0) return bad(absl::StrCat("offsets start at ", offsets[0], ", not 0"));
  for (uint64_t i = 0; i < n; ++i) {
    if (offsets[i + 1] < offsets[i]) {
      return bad(absl::StrCat("offsets decrease at sample ", i, " (", offsets[i + 1], " after ",
                              offsets[i], ")"));
    }
  }
  if (offsets[n] != column.data().size()) {
    return bad(absl::StrCat("offsets end at ", offsets[n], " but data has ", column.data().size(),
                            " bytes"));
  }
  for (uint64_t i = 0; i < n; ++i) {
    const int flag = static_cast<unsigned char>(present[i]);
    if (flag > 1) return bad(absl::StrCat("present[", i, "] is ", flag, " (0 or 1 expected)"));
    if (flag == 0 && offsets[i + 1] != offsets[i]) {
      return bad(
          absl::StrCat("sample ", i, " is absent but has ", offsets[i + 1] - offsets[i], " bytes"));
    }
  }
  column.clear_offsets();  // decoded into offsets_
  field.column_ = std::move(column);
  return field;
}

absl::StatusOr<std::vector<Field>> ParseFields(
    google::protobuf::RepeatedPtrField<v1::FieldColumn> columns, uint32_t num_samples,
    const google::protobuf::RepeatedPtrField<v1::FieldInfo>& declared, absl::string_view where) {
  const std::string prefix = Prefix(where);
  if (columns.empty() && num_samples == 0) {
    // A batch of no samples may carry no columns: empty ones of the
    // declared fields (checked below like any other).
    for (const v1::FieldInfo& info : declared) {
      v1::FieldColumn* c = columns.Add();
      c->set_name(info.name());
      c->set_type(info.type());
      c->set_offsets(std::string(4, '\0'));
    }
  }
  std::vector<Field> fields;
  fields.reserve(columns.size());
  std::set<std::string, std::less<>> names;
  for (v1::FieldColumn& column : columns) {
    const std::string& name = column.name();
    if (name.empty()) return ProtocolError(absl::StrCat(prefix, "a field without a name"));
    if (name.find('\0') != std::string::npos) {
      return ProtocolError(
          absl::StrCat(prefix, "field ", Quoted(name), ": a NUL byte in the field's name"));
    }
    if (!names.insert(name).second) {
      return ProtocolError(absl::StrCat(prefix, "field ", Quoted(name), " comes twice"));
    }
    absl::StatusOr<Field> field = Field::Parse(std::move(column), num_samples, where);
    if (!field.ok()) return field.status();
    fields.push_back(std::move(*field));
  }
  bool same = static_cast<int>(fields.size()) == declared.size();
  for (size_t i = 0; same && i < fields.size(); ++i) {
    same = fields[i].name() == declared[static_cast<int>(i)].name() &&
           fields[i].type() == declared[static_cast<int>(i)].type();
  }
  if (!same) {
    std::vector<std::pair<std::string, std::string>> got, expected;
    for (const Field& f : fields) got.emplace_back(f.name(), TypeText(f.type()));
    for (const v1::FieldInfo& f : declared) expected.emplace_back(f.name(), TypeText(f.type()));
    return ProtocolError(absl::StrCat(prefix, "the batch's fields ", Describe(got),
                                      " differ from the pipeline's ", Describe(expected)));
  }
  return fields;
}

const Field* FindField(std::span<const Field> fields, std::string_view name) {
  for (const Field& f : fields) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

}  // namespace conveyor::client
