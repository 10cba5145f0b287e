// Sample field specs, value checks and the JSON validator. See sample_fields.h.
//
// Why a JSON validator of our own: the one JSON parser among the daemon's
// dependencies, protobuf's (JsonStringToMessage into google.protobuf.Value,
// 3.21), accepts text that is not JSON ({a:1}, [1,], 'a') and refuses JSON
// that is (duplicate object keys, 1e999), so the client's json.loads would
// fail on values the daemon passed and the daemon would fail samples every
// JSON reader accepts; it also builds a tree per value (25 µs for a 150-byte
// object here). Checking the grammar needs no tree: one pass, no allocation.
#include "core/data/sample_fields.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/text_escape.h"
#include "core/data/npy_array.h"

namespace conveyor {

const char* ToString(FieldType type) {
  switch (type) {
    case FieldType::kText: return "text";
    case FieldType::kBytes: return "bytes";
    case FieldType::kJson: return "json";
    case FieldType::kKey: return "key";
    case FieldType::kAugment: return "augment";
    case FieldType::kNpy: return "npy";
    case FieldType::kMask: return "mask";
  }
  return "?";
}

const char* ToString(FieldGeometry g) {
  switch (g) {
    case FieldGeometry::kNone: return "none";
    case FieldGeometry::kBoxesXyxy: return "boxes_xyxy";
    case FieldGeometry::kBoxesXywh: return "boxes_xywh";
    case FieldGeometry::kKeypoints: return "keypoints";
  }
  return "?";
}

namespace {

bool IsFieldName(std::string_view n) {
  if (n.empty() || n.size() > kMaxFieldNameLength) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// A recursive-descent check of RFC 8259's grammar over [p, end).
class JsonChecker {
 public:
  JsonChecker(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  bool Check(std::string* why) {
    SkipSpace();
    const bool ok = Value(0) && (SkipSpace(), p_ == end_ || Fail("text after the JSON value"));
    if (!ok && why != nullptr) *why = why_;
    return ok;
  }

 private:
  bool Fail(const char* what) {
    if (why_.empty()) why_ = what;
    return false;
  }
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool Literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) {
      return Fail("not a JSON value");
    }
    p_ += word.size();
    return true;
  }
  bool Value(int depth) {
    if (p_ == end_) return Fail("the text ends where a value was expected");
    switch (*p_) {
      case '{': return Object(depth + 1);
      case '[': return Array(depth + 1);
      case '"': return String();
      case 't': return Literal("true");
      case 'f': return Literal("false");
      case 'n': return Literal("null");
      default: return Number();
    }
  }
  bool Object(int depth) {
    if (depth > kMaxJsonDepth) return Fail("nested deeper than 128 levels");
    ++p_;  // '{'
    SkipSpace();
    if (p_ < end_ && *p_ == '}') return ++p_, true;
    while (true) {
      SkipSpace();
      if (p_ == end_ || *p_ != '"') return Fail("an object key is not a string");
      if (!String()) return false;
      SkipSpace();
      if (p_ == end_ || *p_ != ':') return Fail("':' missing after an object key");
      ++p_;
      SkipSpace();
      if (!Value(depth)) return false;
      SkipSpace();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') return ++p_, true;
      return Fail("',' or '}' missing in an object");
    }
  }
  bool Array(int depth) {
    if (depth > kMaxJsonDepth) return Fail("nested deeper than 128 levels");
    ++p_;  // '['
    SkipSpace();
    if (p_ < end_ && *p_ == ']') return ++p_, true;
    while (true) {
      SkipSpace();
      if (!Value(depth)) return false;
      SkipSpace();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') return ++p_, true;
      return Fail("',' or ']' missing in an array");
    }
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  bool String() {
    ++p_;                  // '"'
    const char* run = p_;  // raw bytes since the last escape: checked as UTF-8
    while (true) {
      if (p_ == end_) return Fail("a string is not closed");
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"' || c == '\\') {
        if (!IsValidUtf8(std::string_view(run, p_ - run))) return Fail("a string is not UTF-8");
        if (c == '"') return ++p_, true;
        ++p_;
        if (p_ == end_) return Fail("a string is not closed");
        const char e = *p_++;
        if (e == 'u') {
          if (end_ - p_ < 4) return Fail("a \\u escape is cut short");
          for (int i = 0; i < 4; ++i) {
            if (Hex(p_[i]) < 0) return Fail("a \\u escape is not 4 hex digits");
          }
          p_ += 4;
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return Fail("an unknown escape in a string");
        }
        run = p_;
      } else if (c < 0x20) {
        return Fail("a control character in a string");
      } else {
        ++p_;
      }
    }
  }
  bool Digits() {
    const char* start = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ != start;
  }
  bool Number() {
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ == end_) return Fail("not a JSON value");
    if (*p_ == '0') {
      ++p_;
    } else if (!(*p_ >= '1' && *p_ <= '9') || !Digits()) {
      return Fail("not a JSON value");
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!Digits()) return Fail("a number has no digits after its '.'");
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!Digits()) return Fail("a number has no digits in its exponent");
    }
    return true;
  }

  const char* p_;
  const char* const end_;
  std::string why_;
};

}  // namespace

bool IsValidJson(std::string_view text, std::string* why) { return JsonChecker(text).Check(why); }

absl::Status ValidateFieldSpecs(std::span<const SampleFieldSpec> fields) {
  if (fields.size() > kMaxSampleFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("fields: ", fields.size(), " declared, at most ", kMaxSampleFields));
  }
  std::set<std::string_view> names, members;
  for (size_t i = 0; i < fields.size(); ++i) {
    const SampleFieldSpec& f = fields[i];
    const std::string at = absl::StrCat("fields[", i, "] (", EscapeText(f.name, 80), "): ");
    if (!IsFieldName(f.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "a name is 1–", kMaxFieldNameLength,
                       " letters, digits or '_', not starting with a digit"));
    }
    if (!names.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(at, "the name is used twice"));
    }
    if (ReadsNoMember(f.type)) {
      if (!f.member.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "a `", ToString(f.type), "` field has no member"));
      }
    } else {
      if (f.member.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "`member` is required (the extension of the tar member)"));
      }
      if (!members.insert(f.member).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, "member '", EscapeText(f.member), "' is read by another field"));
      }
    }
    if (f.type != FieldType::kNpy && (!f.npy_dtype.empty() || f.geometry != FieldGeometry::kNone)) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "`dtype` and `geometry` are for `type: npy` fields"));
    }
    if (f.geometry != FieldGeometry::kNone && !f.npy_dtype.empty() && f.npy_dtype != "float32" &&
        f.npy_dtype != "float64") {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "boxes are float32 or float64, not ", f.npy_dtype));
    }
    if (f.max_bytes < 1 || f.max_bytes > kMaxFieldValueBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, "max_bytes must be 1–", kMaxFieldValueBytes, ", got ", f.max_bytes));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFieldValue(const SampleFieldSpec& spec, std::span<const uint8_t> value,
                             NpyArray* npy) {
  if (value.size() > spec.max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("field '", spec.name, "': ", value.size(),
                                                   " bytes, more than its max_bytes ",
                                                   spec.max_bytes));
  }
  const std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  switch (spec.type) {
    case FieldType::kText:
      if (!IsValidUtf8(text)) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", spec.name, "': not valid UTF-8 text (type text)"));
      }
      break;
    case FieldType::kJson: {
      std::string why;
      if (!IsValidJson(text, &why)) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", spec.name, "': not valid JSON (", why, ")"));
      }
      break;
    }
    case FieldType::kNpy: {
      absl::StatusOr<NpyArray> a = ParseNpy(value);
      if (!a.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", spec.name, "': ", a.status().message()));
      }
      if (!spec.npy_dtype.empty() && a->dtype != spec.npy_dtype) {
        return absl::InvalidArgumentError(absl::StrCat("field '", spec.name, "': an array of ",
                                                       a->dtype, ", not the declared ",
                                                       spec.npy_dtype));
      }
      if (spec.geometry != FieldGeometry::kNone) {
        if (a->dtype != "float32" && a->dtype != "float64") {
          return absl::InvalidArgumentError(absl::StrCat(
              "field '", spec.name, "': boxes must be float32 or float64, not ", a->dtype));
        }
        const bool points = spec.geometry == FieldGeometry::kKeypoints;
        const int64_t least = points ? 2 : 4;
        if (a->shape.size() != 2 || a->shape[1] < least) {
          return absl::InvalidArgumentError(absl::StrCat(
              "field '", spec.name, "': ", points ? "keypoints" : "boxes", " must have shape [N, ",
              least, " or more], not [", absl::StrJoin(a->shape, ", "), "]"));
        }
      }
      if (npy != nullptr) *npy = *std::move(a);
      break;
    }
    case FieldType::kBytes:
    case FieldType::kKey:
    case FieldType::kAugment:      // made by the daemon
    case FieldType::kMask: break;  // a mask is checked by decoding it
  }
  return absl::OkStatus();
}

void ReadBoxes(const NpyArray& a, std::vector<double>* out, size_t* columns) {
  const size_t n = a.data.size() / a.item_bytes;
  *columns = a.shape.size() == 2 ? static_cast<size_t>(a.shape[1]) : 4;
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (a.dtype == "float32") {
      float v;
      std::memcpy(&v, a.data.data() + 4 * i, 4);
      (*out)[i] = v;
    } else {
      std::memcpy(&(*out)[i], a.data.data() + 8 * i, 8);
    }
  }
}

void WholeFileParts::Key(uint64_t index, std::string* out) const {
  *out = names_->relative_path(index);
}

}  // namespace conveyor
