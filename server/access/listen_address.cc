#include "server/access/listen_address.h"

#include <sys/socket.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace conveyor::server {

absl::Status SplitHostPort(const std::string& text, absl::string_view what, std::string* host,
                           std::string* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address '", text, "' is not HOST:PORT"));
  }
  *host = text.substr(0, colon);
  *port = text.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(*port, &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address '", text, "': port must be 0 … 65535"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueAddrInfo> ResolveListenAddress(const std::string& host_port,
                                                    absl::string_view what) {
  std::string host, port;
  if (absl::Status st = SplitHostPort(host_port, what, &host, &port); !st.ok()) return st;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const char* node = host.empty() || host == "*" ? nullptr : host.c_str();
  if (int rc = ::getaddrinfo(node, port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address '", host_port, "': ", gai_strerror(rc)));
  }
  UniqueAddrInfo addrs(found);
  if (addrs == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " address '", host_port, "': no address"));
  }
  return addrs;
}

}  // namespace conveyor::server
