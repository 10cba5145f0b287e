#include "remote/http_response_head.h"

#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/text_escape.h"

namespace conveyor::remote {

namespace {

ResponseHead Fail(ResponseHead::Parse p, const char* why) {
  ResponseHead h;
  h.parse = p;
  h.why = why;
  return h;
}

// (Debian's absl::string_view is a type of its own.)
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool StartsWith(std::string_view s, std::string_view prefix) {
  return absl::StartsWith(Sv(s), Sv(prefix));
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(Sv(a), Sv(b));
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Whether the comma-separated list `value` holds `token` (case-insensitive).
bool HasToken(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (EqualsIgnoreCase(Trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// A decimal number that is all of `s` (no sign, no spaces; fits uint64).
bool ParseDecimal(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// Bytes of a hostile Content-Range quoted in a message at most.
constexpr size_t kMaxQuotedFieldBytes = 80;

}  // namespace

ResponseHead ParseResponseHead(std::string_view bytes, size_t max_head_bytes) {
  const size_t end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (bytes.size() >= max_head_bytes) {
      return Fail(ResponseHead::Parse::kUnsupported, "the answer's head is too long");
    }
    // A server that ends lines with a bare LF is legal to tolerate but left
    // to libcurl; one that sends no head at all is not HTTP.
    if (bytes.size() >= 5 && !StartsWith(bytes, "HTTP/")) {
      return Fail(ResponseHead::Parse::kMalformed, "the answer is not HTTP");
    }
    return Fail(ResponseHead::Parse::kIncomplete, "");
  }
  if (end + 4 > max_head_bytes) {
    return Fail(ResponseHead::Parse::kUnsupported, "the answer's head is too long");
  }
  std::string_view head = bytes.substr(0, end + 2);  // each line with its CRLF

  // Status line: HTTP/1.x SP 3DIGIT [SP reason]
  const size_t eol = head.find("\r\n");
  const std::string_view line = head.substr(0, eol);
  head.remove_prefix(eol + 2);
  if (line.size() < 12 || !StartsWith(line, "HTTP/1.") || line[8] != ' ') {
    if (StartsWith(line, "HTTP/")) {
      return Fail(ResponseHead::Parse::kUnsupported, "an HTTP version other than 1.0 or 1.1");
    }
    return Fail(ResponseHead::Parse::kMalformed, "the answer is not HTTP");
  }
  const char minor = line[7];
  if (minor != '0' && minor != '1') {
    return Fail(ResponseHead::Parse::kUnsupported, "an HTTP version other than 1.0 or 1.1");
  }
  int status = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(line[i]))) {
      return Fail(ResponseHead::Parse::kMalformed, "a bad status code");
    }
    status = status * 10 + (line[i] - '0');
  }
  if (line.size() > 12 && line[12] != ' ') {
    return Fail(ResponseHead::Parse::kMalformed, "a bad status code");
  }
  if (status < 200) return Fail(ResponseHead::Parse::kUnsupported, "an interim (1xx) answer");

  ResponseHead h;
  h.status = status;
  bool have_length = false;
  bool close = false;             // "Connection: close"
  bool asked_keep_alive = false;  // "Connection: keep-alive" (HTTP/1.0)
  while (!head.empty()) {
    const size_t e = head.find("\r\n");
    const std::string_view field = head.substr(0, e);
    head.remove_prefix(e + 2);
    if (field.front() == ' ' || field.front() == '\t') {
      return Fail(ResponseHead::Parse::kUnsupported, "a folded header line");
    }
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      return Fail(ResponseHead::Parse::kMalformed, "a header line without a name");
    }
    const std::string_view name = field.substr(0, colon);
    const std::string_view value = Trim(field.substr(colon + 1));
    if (EqualsIgnoreCase(name, "Content-Length")) {
      uint64_t n = 0;
      const auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (ec != std::errc() || p != value.data() + value.size() || value.empty()) {
        return Fail(ResponseHead::Parse::kMalformed, "a bad Content-Length");
      }
      if (have_length && n != h.content_length) {
        return Fail(ResponseHead::Parse::kMalformed, "two different Content-Lengths");
      }
      have_length = true;
      h.content_length = n;
    } else if (EqualsIgnoreCase(name, "Content-Range")) {
      if (h.content_range.has_value() && *h.content_range != value) {
        return Fail(ResponseHead::Parse::kMalformed, "two different Content-Ranges");
      }
      h.content_range = value;
    } else if (EqualsIgnoreCase(name, "Transfer-Encoding")) {
      return Fail(ResponseHead::Parse::kUnsupported, "a Transfer-Encoding (chunked) body");
    } else if (EqualsIgnoreCase(name, "Connection")) {
      if (HasToken(value, "close")) close = true;
      if (HasToken(value, "keep-alive")) asked_keep_alive = true;
    }
  }
  h.keep_alive = !close && (minor == '1' || asked_keep_alive);
  if (status == 204 || status == 304) {
    h.content_length = 0;
  } else if (!have_length) {
    return Fail(ResponseHead::Parse::kUnsupported, "a body without Content-Length");
  }
  h.head_bytes = end + 4;
  h.parse = ResponseHead::Parse::kOk;
  return h;
}

std::optional<ContentRange> ParseContentRange(std::string_view value) {
  value = Trim(value);
  // "bytes" SP first "-" last "/" (total | "*"); the unit is case-insensitive.
  constexpr std::string_view kUnit = "bytes ";
  if (value.size() < kUnit.size() || !EqualsIgnoreCase(value.substr(0, kUnit.size()), kUnit)) {
    return std::nullopt;
  }
  value.remove_prefix(kUnit.size());
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) {
    return std::nullopt;
  }
  ContentRange r;
  if (!ParseDecimal(value.substr(0, dash), &r.first) ||
      !ParseDecimal(value.substr(dash + 1, slash - dash - 1), &r.last) || r.last < r.first) {
    return std::nullopt;
  }
  const std::string_view total = value.substr(slash + 1);
  if (total != "*") {
    if (!ParseDecimal(total, &r.total) || r.last >= r.total) return std::nullopt;
  }
  return r;
}

std::string ContentRangeMismatch(std::optional<std::string_view> value, uint64_t offset,
                                 uint64_t length, uint64_t known_size) {
  const uint64_t last = offset + length - 1;
  const std::string asked = absl::StrCat("bytes ", offset, "-", last);
  if (!value.has_value()) {
    return absl::StrCat("HTTP 206 answer without a Content-Range (", asked, " asked)");
  }
  const std::string quoted = EscapeText(*value, kMaxQuotedFieldBytes);
  const std::optional<ContentRange> r = ParseContentRange(*value);
  if (!r.has_value()) {
    return absl::StrCat("HTTP 206 answer with a bad Content-Range '", quoted, "' (", asked,
                        " asked)");
  }
  // A range that runs past the object's end is answered up to its end
  // (the reader then reports the short read): the total says so.
  const bool clipped =
      r->last < last && r->total != ContentRange::kUnknownTotal && r->last + 1 == r->total;
  if (r->first != offset || r->last > last || (r->last < last && !clipped)) {
    return absl::StrCat("HTTP 206 answer for another range: Content-Range '", quoted, "', ", asked,
                        " asked");
  }
  if (known_size != 0 && r->total != ContentRange::kUnknownTotal && r->total != known_size) {
    return absl::StrCat("HTTP 206 answer from an object of another size: Content-Range '", quoted,
                        "', the object had ", known_size, " bytes");
  }
  return "";
}

}  // namespace conveyor::remote
