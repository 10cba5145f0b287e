// Server addresses of the C++ client: how a user's address ("unix:///x.sock",
// "/x.sock", "host:port", "dns:///host:port", "ipv4:a.b.c.d:port",
// "ipv6:[::1]:port") becomes a gRPC target, and which host a DATA_SOCKET
// stream's data connection goes to (the host of a TCP address; none for a
// unix socket). The same rules as the Python client's grpc_target/tcp_host.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace conveyor::client {

// The gRPC target of `address`: an absolute path becomes "unix://PATH";
// anything else is passed on. InvalidArgument for an empty address.
absl::StatusOr<std::string> GrpcTarget(std::string_view address);

// The host of a TCP address (brackets of an IPv6 literal removed), or
// nullopt for a unix socket address ("unix:", "unix-abstract:", a path).
std::optional<std::string> TcpHost(std::string_view address);

}  // namespace conveyor::client
