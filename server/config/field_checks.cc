#include "server/config/field_checks.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace conveyor::server {

bool ValidPipelineName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  if (!absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

absl::Status ParseUnixMode(const std::string& text, mode_t* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (absl::StartsWith(s, "0o") || absl::StartsWith(s, "0O")) s = s.substr(2);
  if (s.empty() || s.size() > 4 ||
      !std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '7'; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an octal file mode such as 0660, got '", text, "'"));
  }
  const mode_t mode = static_cast<mode_t>(std::stoul(s, nullptr, 8));
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat("mode '", text, "' has bits beyond 0777"));
  }
  if ((mode & 0600) != 0600) {
    return absl::InvalidArgumentError(
        absl::StrCat("mode '", text, "' must let the owner read and write (0600 at least)"));
  }
  if ((mode & 0007) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode '", text, "' must not grant access to others; share the socket through a group"));
  }
  *out = mode;
  return absl::OkStatus();
}

absl::Status ValidateTcpAddress(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected host:port (e.g. 0.0.0.0:7070 or [::1]:0), got '", addr, "'"));
  }
  const std::string host = addr.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return absl::InvalidArgumentError(absl::StrCat("unbalanced brackets in '", addr, "'"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port of '", addr, "' must be an integer within [0, 65535]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMetricsAddress(const std::string& addr) {
  const std::string example = "expected IPV4:PORT or [IPV6]:PORT, e.g. 127.0.0.1:9464";
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat(example, ", got '", addr, "'"));
  }
  std::string host = addr.substr(0, colon);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) host = host.substr(1, host.size() - 2);
  unsigned char buf[sizeof(in6_addr)];
  if (bracketed ? inet_pton(AF_INET6, host.c_str(), buf) != 1
                : inet_pton(AF_INET, host.c_str(), buf) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(example, ", got '", addr, "' (host names are not resolved)"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port of '", addr, "' must be an integer within [0, 65535]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLogFormat(const std::string& format) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log format '", format, "' (text or json)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateUnixPath(const std::string& path) {
  // sun_path holds 108 bytes with the NUL; the ".fd" sibling needs 3 more.
  if (path.size() + 3 >= 108) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is too long (",
                                                   path.size(), " bytes; at most 104)"));
  }
  return absl::OkStatus();
}

}  // namespace conveyor::server
