// EscapeText: the one way a string that came from a dataset (file names,
// error reasons quoting them) or from a client (pipeline names) is put into
// a conveyor.v1 message, a gRPC status or a log line. The result is always
// valid UTF-8 with no control characters, so it can go into a proto3
// `string` field (which clients refuse to parse otherwise) and cannot forge
// a log line or a terminal escape:
//
//   - valid UTF-8 is kept as is, except the characters below;
//   - "\n", "\r", "\t" become those two-character escapes;
//   - every other byte that is a C0 control (0x00-0x1f) or DEL (0x7f), and
//     every byte that is not part of a valid UTF-8 sequence (stray
//     continuation bytes, truncated sequences, overlong encodings, UTF-16
//     surrogates, code points above U+10FFFF, 0xc0/0xc1/0xf5-0xff), becomes
//     "\xNN" (two lower-case hex digits), one escape per byte;
//   - C1 controls (U+0080-U+009F), the line and paragraph separators
//     (U+2028, U+2029) and the bidirectional overrides and isolates
//     (U+202A-U+202E, U+2066-U+2069), which change how a line reads, become
//     "\uXXXX".
//
// Backslashes are not escaped: escaping is idempotent (escaping an escaped
// string returns it unchanged), so layers may escape again safely, at the
// price that a name containing a literal "\x41" reads like an escaped byte.
//
// With `max_bytes`, a longer result is cut at an escape or character
// boundary at or below `max_bytes` bytes and "…(N bytes)" is appended, N
// being the size of the input: for client-supplied strings (kClientStringCap)
// that would otherwise be logged or echoed back whole.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace conveyor {

// Cap for client-supplied strings echoed in statuses or logged.
inline constexpr size_t kClientStringCap = 256;

std::string EscapeText(std::string_view in, size_t max_bytes = std::numeric_limits<size_t>::max());
// The same for absl's string_view (status messages), which this abseil does
// not alias to std::string_view, and for the types both accept.
inline std::string EscapeText(absl::string_view in,
                              size_t max_bytes = std::numeric_limits<size_t>::max()) {
  return EscapeText(std::string_view(in.data(), in.size()), max_bytes);
}
inline std::string EscapeText(const std::string& in,
                              size_t max_bytes = std::numeric_limits<size_t>::max()) {
  return EscapeText(std::string_view(in), max_bytes);
}
inline std::string EscapeText(const char* in,
                              size_t max_bytes = std::numeric_limits<size_t>::max()) {
  return EscapeText(std::string_view(in), max_bytes);
}

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points
// above U+10FFFF). Control characters are valid.
bool IsValidUtf8(std::string_view s);

}  // namespace conveyor
