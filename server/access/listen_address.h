// ListenAddress: the "HOST:PORT" of a TCP listener of the daemon (the gRPC
// TCP port, the data socket), parsed and resolved to the local addresses to
// bind. One parser, so both listeners take the same forms: "HOST:PORT",
// "[V6]:PORT", ":PORT" and "*:PORT" (every interface); PORT 0 lets the
// kernel pick.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <netdb.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/unique_fd.h"

namespace conveyor::server {

struct AddrInfoDeleter {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
// getaddrinfo's list, freed with it.
using UniqueAddrInfo = std::unique_ptr<addrinfo, AddrInfoDeleter>;

// Splits `text` into host (brackets of an IPv6 literal removed; "" for
// ":PORT") and port. InvalidArgument naming `what` ("TCP", "data socket")
// and the text when it is not HOST:PORT or the port is not 0 … 65535.
absl::Status SplitHostPort(const std::string& text, absl::string_view what, std::string* host,
                           std::string* port);

// The addresses to bind for `host_port` (passive, stream sockets, numeric
// port): every address of the host, IPv6 and IPv4 ("localhost": ::1 and
// 127.0.0.1). InvalidArgument naming `what` and the text when it does not
// parse or resolve. Never an empty list.
absl::StatusOr<UniqueAddrInfo> ResolveListenAddress(const std::string& host_port,
                                                    absl::string_view what);

// Listening sockets (non-blocking, close-on-exec, SO_REUSEADDR) bound to
// `host_port`. kEveryAddress: one per address of the host, all on one port
// (the first one's, when port 0 lets the kernel pick), IPv6 ones
// IPV6_V6ONLY beside IPv4 ones; kFirstAddress: the first address that binds.
// UNAVAILABLE naming `what` and the address when none binds; the parse and
// resolve errors of ResolveListenAddress.
struct ListenSockets {
  std::vector<UniqueFd> fds;  // never empty
  int port = 0;               // the port they are bound to
};
enum class BindAddresses { kEveryAddress, kFirstAddress };
absl::StatusOr<ListenSockets> BindListenSockets(const std::string& host_port,
                                                absl::string_view what, BindAddresses which,
                                                int backlog);

}  // namespace conveyor::server
