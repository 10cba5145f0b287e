#include "server/access/listen_address.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"

namespace conveyor::server {

absl::Status SplitHostPort(const std::string& text, absl::string_view what, std::string* host,
                           std::string* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " address '", text, "' is not HOST:PORT"));
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
    return absl::InvalidArgumentError(absl::StrCat(what, " address '", host_port, "': no address"));
  }
  return addrs;
}

namespace {

int PortOf(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}

void SetPort(addrinfo* a, int port) {
  if (a->ai_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(port);
  } else if (a->ai_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(port);
  }
}

}  // namespace

absl::StatusOr<ListenSockets> BindListenSockets(const std::string& host_port,
                                                absl::string_view what, BindAddresses which,
                                                int backlog) {
  absl::StatusOr<UniqueAddrInfo> resolved = ResolveListenAddress(host_port, what);
  if (!resolved.ok()) return resolved.status();
  const UniqueAddrInfo addrs = *std::move(resolved);
  size_t count = 0;
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) ++count;
  ListenSockets out;
  std::string last_error = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(
        ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_error = std::string(PosixError("socket", errno).message());
      continue;
    }
    const int one = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      return PosixError(absl::StrCat(what, " ", host_port, ": setsockopt SO_REUSEADDR"), errno);
    }
    const bool every = which == BindAddresses::kEveryAddress;
    // Beside an IPv4 address, an IPv6 one must not claim IPv4 too.
    if (every && a->ai_family == AF_INET6 && count > 1 &&
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) != 0) {
      return PosixError(absl::StrCat(what, " ", host_port, ": setsockopt IPV6_V6ONLY"), errno);
    }
    if (out.port != 0) SetPort(a, out.port);
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_error = std::string(PosixError("bind/listen", errno).message());
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      return PosixError(absl::StrCat(what, " ", host_port, ": getsockname"), errno);
    }
    out.port = PortOf(bound);
    out.fds.push_back(std::move(fd));
    if (!every) break;
  }
  if (out.fds.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", what, " ", host_port, ": ", last_error));
  }
  return out;
}

}  // namespace conveyor::server
