#include "core/data/npy_array.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conveyor {

namespace {

constexpr size_t kMaxHeaderBytes = 64 << 10;
constexpr size_t kMaxDims = 32;

absl::Status Bad(const std::string& why) { return absl::InvalidArgumentError("npy: " + why); }

// A cursor over the header's Python dict literal.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  void Space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
  }
  bool Eat(char c) {
    Space();
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  bool Quoted(std::string* out) {
    Space();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) return false;
    const char q = s[i++];
    const size_t end = s.find(q, i);
    if (end == std::string_view::npos) return false;
    out->assign(s.substr(i, end - i));
    i = end + 1;
    return true;
  }
  bool Word(std::string_view w) {
    Space();
    if (s.substr(i, w.size()) != w) return false;
    i += w.size();
    return true;
  }
  bool Int(int64_t* v) {
    Space();
    const size_t start = i;
    int64_t x = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (x > (std::numeric_limits<int64_t>::max() - 9) / 10) return false;
      x = x * 10 + (s[i++] - '0');
    }
    if (i < s.size() && s[i] == 'L') ++i;  // Python 2 longs
    *v = x;
    return i != start;
  }
};

// numpy's descr ("<f4", "|u1", "<i8", "|b1") -> our name and item size.
bool DtypeOf(const std::string& descr, std::string* name, size_t* size) {
  if (descr.size() < 3) return false;
  const char order = descr[0];
  const char kind = descr[1];
  int bytes = 0;
  for (size_t k = 2; k < descr.size(); ++k) {
    if (descr[k] < '0' || descr[k] > '9') return false;
    bytes = bytes * 10 + (descr[k] - '0');
    if (bytes > 16) return false;
  }
  if (order == '>') return false;
  if (order == '|' && bytes != 1) return false;
  if (order != '<' && order != '|' && order != '=') return false;
  switch (kind) {
    case 'f':
      if (bytes != 4 && bytes != 8) return false;
      *name = bytes == 4 ? "float32" : "float64";
      break;
    case 'i':
    case 'u':
      if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) return false;
      *name = absl::StrCat(kind == 'i' ? "int" : "uint", 8 * bytes);
      break;
    case 'b':
      if (bytes != 1) return false;
      *name = "bool";
      break;
    default: return false;
  }
  *size = static_cast<size_t>(bytes);
  return true;
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(std::span<const uint8_t> bytes) {
  static constexpr uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Bad("not a .npy file (no \\x93NUMPY magic)");
  }
  const uint8_t major = bytes[6];
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return Bad("the header is cut short");
    header_len =
        bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    prefix = 12;
  } else {
    return Bad(absl::StrCat("format version ", major, " is not 1, 2 or 3"));
  }
  if (header_len > kMaxHeaderBytes) return Bad("the header is larger than 64 KiB");
  if (bytes.size() - prefix < header_len) return Bad("the header is cut short");
  Cursor c{std::string_view(reinterpret_cast<const char*>(bytes.data() + prefix), header_len)};
  if (!c.Eat('{')) return Bad("the header is not a dict");
  std::string descr;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  std::vector<int64_t> shape;
  while (!c.Eat('}')) {
    std::string key;
    if (!c.Quoted(&key) || !c.Eat(':')) return Bad("the header's dict is malformed");
    if (key == "descr" && !have_descr) {
      if (!c.Quoted(&descr)) return Bad("descr is not a string (structured dtypes are refused)");
      have_descr = true;
    } else if (key == "fortran_order" && !have_order) {
      if (c.Word("True")) {
        fortran = true;
      } else if (!c.Word("False")) {
        return Bad("fortran_order is neither True nor False");
      }
      have_order = true;
    } else if (key == "shape" && !have_shape) {
      if (!c.Eat('(')) return Bad("shape is not a tuple");
      while (!c.Eat(')')) {
        int64_t d = 0;
        if (!c.Int(&d)) return Bad("shape holds something other than integers");
        shape.push_back(d);
        if (shape.size() > kMaxDims) return Bad("more than 32 dimensions");
        if (!c.Eat(',') && !(c.Space(), c.i < c.s.size() && c.s[c.i] == ')')) {
          return Bad("shape is malformed");
        }
      }
      have_shape = true;
    } else {
      return Bad(
          absl::StrCat("unexpected or repeated key '", key.substr(0, 32), "' in the header"));
    }
    if (!c.Eat(',')) {
      if (!c.Eat('}')) return Bad("the header's dict is malformed");
      break;
    }
  }
  if (!have_descr || !have_order || !have_shape) {
    return Bad("the header lacks descr, fortran_order or shape");
  }
  if (fortran) return Bad("Fortran-ordered arrays are refused (save them in C order)");
  NpyArray a;
  if (!DtypeOf(descr, &a.dtype, &a.item_bytes)) {
    return Bad(absl::StrCat("element type '", descr.substr(0, 16),
                            "' is not a little-endian bool, integer or float"));
  }
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / a.item_bytes / d) {
      return Bad("the shape's size overflows");
    }
    count *= static_cast<uint64_t>(d);
  }
  const size_t data_at = prefix + header_len;
  const uint64_t want = count * a.item_bytes;
  if (bytes.size() - data_at != want) {
    return Bad(absl::StrCat("shape (", absl::StrJoin(shape, ", "), ") of ", a.dtype, " needs ",
                            want, " bytes of data, the file has ", bytes.size() - data_at));
  }
  a.shape = std::move(shape);
  a.data = bytes.subspan(data_at);
  return a;
}

void WriteNpyFloat32(std::span<const float> values, int64_t rows, int64_t cols,
                     std::vector<uint8_t>* out) {
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", rows, ", ", cols, "), }");
  // Magic, version, length, then the header padded with spaces to a
  // multiple of 64 bytes, ending in a newline (numpy's own layout).
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  static constexpr uint8_t kStart[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out->resize(sizeof(kStart) + 2 + header.size() + values.size_bytes());
  uint8_t* at = out->data();
  std::memcpy(at, kStart, sizeof(kStart));
  at += sizeof(kStart);
  *at++ = static_cast<uint8_t>(header.size() & 0xff);
  *at++ = static_cast<uint8_t>(header.size() >> 8);
  std::memcpy(at, header.data(), header.size());
  at += header.size();
  if (!values.empty()) std::memcpy(at, values.data(), values.size_bytes());
}

}  // namespace conveyor
