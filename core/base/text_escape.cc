#include "core/base/text_escape.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_format.h"

namespace conveyor {
namespace {

// Length of the valid UTF-8 sequence at the start of `s` (1-4) and its code
// point, or 0 when the first byte does not start one.
size_t DecodeOne(std::string_view s, uint32_t* cp) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(0);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  size_t n;
  uint32_t v;
  uint32_t min;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, v = c & 0x1f, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, v = c & 0x0f, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;  // continuation byte, 0xc0/0xc1 (always overlong), 0xf5-0xff
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(i) & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

bool NeedsUnicodeEscape(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

// The escaped form of the unit at the start of `s`; sets *consumed.
std::string EscapeOne(std::string_view s, size_t* consumed) {
  uint32_t cp = 0;
  const size_t n = DecodeOne(s, &cp);
  if (n == 0) {
    *consumed = 1;
    return absl::StrFormat("\\x%02x", static_cast<uint8_t>(s[0]));
  }
  *consumed = n;
  if (n == 1) {
    if (cp == '\n') return "\\n";
    if (cp == '\r') return "\\r";
    if (cp == '\t') return "\\t";
    if (cp < 0x20 || cp == 0x7f) return absl::StrFormat("\\x%02x", cp);
    return std::string(1, static_cast<char>(cp));
  }
  if (NeedsUnicodeEscape(cp)) return absl::StrFormat("\\u%04x", cp);
  return std::string(s.substr(0, n));
}

}  // namespace

std::string EscapeText(std::string_view in, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(in.size(), max_bytes) + 8);
  size_t i = 0;
  while (i < in.size()) {
    size_t consumed = 0;
    const std::string unit = EscapeOne(in.substr(i), &consumed);
    if (out.size() + unit.size() > max_bytes) {
      absl::StrAppendFormat(&out, "\xe2\x80\xa6(%d bytes)", in.size());
      return out;
    }
    out += unit;
    i += consumed;
  }
  return out;
}

bool IsValidUtf8(std::string_view s) {
  uint32_t cp = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t n = DecodeOne(s.substr(i), &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace conveyor
