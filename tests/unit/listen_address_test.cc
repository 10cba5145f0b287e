// The listeners' "HOST:PORT" parser and resolver (server/access/listen_address.h).
#include "server/access/listen_address.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <catch2/catch.hpp>
#include <string>

namespace conveyor::server {
namespace {

TEST_CASE("listen address: the forms HOST:PORT, [V6]:PORT and :PORT", "[listen_address]") {
  std::string host, port;
  REQUIRE(SplitHostPort("127.0.0.1:8080", "TCP", &host, &port).ok());
  CHECK(host == "127.0.0.1");
  CHECK(port == "8080");
  REQUIRE(SplitHostPort("[::1]:0", "TCP", &host, &port).ok());
  CHECK(host == "::1");
  CHECK(port == "0");
  REQUIRE(SplitHostPort(":9000", "data socket", &host, &port).ok());
  CHECK(host.empty());
  CHECK(port == "9000");
}

TEST_CASE("listen address: bad ports and missing ports name the listener and the text",
          "[listen_address]") {
  std::string host, port;
  for (const char* bad : {"localhost", "localhost:", "h:65536", "h:-1", "h:http"}) {
    const absl::Status st = SplitHostPort(bad, "data socket", &host, &port);
    INFO(bad << ": " << st.message());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(st.message()).find(std::string("data socket address '") + bad + "'") !=
          std::string::npos);
  }
}

TEST_CASE("listen address: resolves to the host's addresses, every interface for '*'",
          "[listen_address]") {
  absl::StatusOr<UniqueAddrInfo> loop = ResolveListenAddress("127.0.0.1:0", "TCP");
  REQUIRE(loop.ok());
  REQUIRE(*loop != nullptr);
  CHECK((*loop)->ai_family == AF_INET);
  CHECK((*loop)->ai_next == nullptr);
  const auto* in = reinterpret_cast<const sockaddr_in*>((*loop)->ai_addr);
  CHECK(in->sin_addr.s_addr == htonl(INADDR_LOOPBACK));

  absl::StatusOr<UniqueAddrInfo> any = ResolveListenAddress("*:0", "TCP");
  REQUIRE(any.ok());
  REQUIRE(*any != nullptr);

  absl::StatusOr<UniqueAddrInfo> bad = ResolveListenAddress("no such host.invalid:1", "TCP");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("TCP address 'no such host.invalid:1'") !=
        std::string::npos);
}

int BoundPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

TEST_CASE("listen sockets: every address on one port, or the first; a taken port is an error",
          "[listen_address]") {
  absl::StatusOr<ListenSockets> every =
      BindListenSockets("localhost:0", "TCP", BindAddresses::kEveryAddress, 16);
  REQUIRE(every.ok());
  REQUIRE(!every->fds.empty());
  CHECK(every->port > 0);
  for (const UniqueFd& fd : every->fds) CHECK(BoundPort(fd.get()) == every->port);

  absl::StatusOr<ListenSockets> first =
      BindListenSockets("127.0.0.1:0", "data socket", BindAddresses::kFirstAddress, 16);
  REQUIRE(first.ok());
  REQUIRE(first->fds.size() == 1);
  CHECK(BoundPort(first->fds.front().get()) == first->port);

  // SO_REUSEADDR does not let a second listener onto a port that listens.
  absl::StatusOr<ListenSockets> taken = BindListenSockets(
      "127.0.0.1:" + std::to_string(first->port), "data socket", BindAddresses::kFirstAddress, 16);
  CHECK(taken.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(taken.status().message()).find("cannot listen on data socket 127.0.0.1:") !=
        std::string::npos);
}

}  // namespace
}  // namespace conveyor::server
