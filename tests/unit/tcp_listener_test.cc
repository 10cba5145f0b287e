// The TCP listener's policy: when a client's first message is complete,
// which pending connection a new one evicts, and the fd high-water mark.
#include "server/access/tcp_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/base/unique_fd.h"

namespace conveyor::server {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

const std::string kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

}  // namespace

TEST_CASE("tcp first message: the HTTP/2 preface and the frame after it", "[tcp_listener]") {
  // An empty SETTINGS frame: length 0, type 4.
  const std::string settings("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  std::vector<uint8_t> all = Bytes(kPreface + settings);
  CHECK(CheckFirstMessage(all, false) == FirstMessage::kComplete);
  for (size_t n = 0; n < all.size(); ++n) {
    INFO(n);
    CHECK(CheckFirstMessage(absl::MakeConstSpan(all.data(), n), false) ==
          FirstMessage::kIncomplete);
  }
  // A SETTINGS frame with one setting (6 bytes) is complete only with them.
  std::vector<uint8_t> six =
      Bytes(kPreface + std::string("\x00\x00\x06\x04\x00\x00\x00\x00\x00", 9));
  CHECK(CheckFirstMessage(six, false) == FirstMessage::kIncomplete);
  six.resize(six.size() + 6, 0);
  CHECK(CheckFirstMessage(six, false) == FirstMessage::kComplete);
  // Anything else is no gRPC client's.
  CHECK(CheckFirstMessage(Bytes("GET / HTTP/1.1\r\n"), false) == FirstMessage::kMalformed);
  CHECK(CheckFirstMessage(Bytes("P"), false) == FirstMessage::kIncomplete);
  CHECK(CheckFirstMessage(Bytes("X"), false) == FirstMessage::kMalformed);
  // A frame longer than any first message could be.
  CHECK(CheckFirstMessage(Bytes(kPreface + std::string("\x7f\xff\xff\x04\x00\x00\x00\x00\x00", 9)),
                          false) == FirstMessage::kMalformed);
}

TEST_CASE("tcp first message: one whole TLS record", "[tcp_listener]") {
  std::vector<uint8_t> record = {0x16, 0x03, 0x01, 0x00, 0x04, 1, 2, 3, 4};
  CHECK(CheckFirstMessage(record, true) == FirstMessage::kComplete);
  for (size_t n = 0; n < record.size(); ++n) {
    INFO(n);
    CHECK(CheckFirstMessage(absl::MakeConstSpan(record.data(), n), true) ==
          FirstMessage::kIncomplete);
  }
  // Plaintext HTTP/2 on a TLS port, and an empty record.
  CHECK(CheckFirstMessage(Bytes(kPreface), true) == FirstMessage::kMalformed);
  CHECK(CheckFirstMessage(std::vector<uint8_t>{0x16, 0x03, 0x01, 0x00, 0x00}, true) ==
        FirstMessage::kMalformed);
}

TEST_CASE("pending connections: a peer at its cap evicts its own oldest", "[tcp_listener]") {
  using Clock = PendingConnections::Clock;
  const Clock::time_point t0{};
  PendingConnections p(/*max_per_peer=*/2, /*max_total=*/4);
  CHECK(p.ToEvictFor("a").fd == -1);
  p.Add(10, "a", t0);
  p.Add(11, "b", t0);
  p.Add(12, "a", t0);
  // "a" has two: its oldest (10) goes, not "b"'s.
  PendingConnections::Eviction e = p.ToEvictFor("a");
  CHECK(e.fd == 10);
  CHECK(e.reason == TcpRefusal::kPeerPendingCap);
  CHECK(p.ToEvictFor("b").fd == -1);
  p.Remove(10);
  CHECK(p.PendingOf("a") == 1);
  CHECK(p.ToEvictFor("a").fd == -1);
}

TEST_CASE("pending connections: at the total cap the oldest of all goes", "[tcp_listener]") {
  using Clock = PendingConnections::Clock;
  const Clock::time_point t0{};
  PendingConnections p(/*max_per_peer=*/8, /*max_total=*/3);
  p.Add(5, "a", t0);
  p.Add(6, "b", t0);
  p.Add(7, "c", t0);
  PendingConnections::Eviction e = p.ToEvictFor("d");
  CHECK(e.fd == 5);
  CHECK(e.reason == TcpRefusal::kPendingCap);
  CHECK(p.Oldest() == 5);
  p.Remove(5);
  CHECK(p.Oldest() == 6);
  CHECK(p.ToEvictFor("d").fd == -1);
  p.Remove(99);  // not pending: nothing happens
  CHECK(p.size() == 2);
}

TEST_CASE("pending connections: deadlines expire oldest first", "[tcp_listener]") {
  using Clock = PendingConnections::Clock;
  const Clock::time_point t0{};
  PendingConnections p(8, 8);
  CHECK(!p.NextDeadline().has_value());
  p.Add(3, "a", t0 + std::chrono::seconds(1));
  p.Add(4, "a", t0 + std::chrono::seconds(2));
  p.Add(8, "b", t0 + std::chrono::seconds(3));
  CHECK(p.NextDeadline() == t0 + std::chrono::seconds(1));
  CHECK(p.Expired(t0).empty());
  CHECK(p.Expired(t0 + std::chrono::seconds(2)) == std::vector<int>{3, 4});
}

TEST_CASE("fd high-water mark keeps a reserve for sample reads", "[tcp_listener]") {
  CHECK(FdHighWaterMark(1024, 8) == 1024 - 128);
  CHECK(FdHighWaterMark(256, 2) == 256 - 32);
  // Many workers: 2 per worker and some.
  CHECK(FdHighWaterMark(1024, 100) == 1024 - 216);
  // Tiny limits still leave a quarter for connections.
  CHECK(FdHighWaterMark(64, 64) == 16);
}

}  // namespace conveyor::server

namespace conveyor::server {
namespace {

// A listening IPv4 socket on 127.0.0.1 and a port of its.
UniqueFd ListenLoopback(int* port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(::listen(fd.get(), 4) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
  *port = ntohs(a.sin_port);
  return fd;
}

}  // namespace

TEST_CASE("local peer uid: the owner of a loopback connection's other end", "[tcp_listener]") {
  int port = 0;
  UniqueFd listening = ListenLoopback(&port);
  SECTION("an IPv4 client") {
    UniqueFd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    to.sin_port = htons(port);
    REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
    UniqueFd conn(::accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(conn);
    CHECK(LocalPeerUid(conn.get()) == std::optional<uid_t>(::getuid()));
  }
  SECTION("a dual-stack IPv6 client (as gRPC's), listed in tcp6 as ::ffff:127.0.0.1") {
    UniqueFd client(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!client) return;  // no IPv6 sockets here
    sockaddr_in6 to{};
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(port);
    REQUIRE(::inet_pton(AF_INET6, "::ffff:127.0.0.1", &to.sin6_addr) == 1);
    REQUIRE(::connect(client.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0);
    UniqueFd conn(::accept4(listening.get(), nullptr, nullptr, SOCK_CLOEXEC));
    REQUIRE(conn);
    CHECK(LocalPeerUid(conn.get()) == std::optional<uid_t>(::getuid()));
  }
}

}  // namespace conveyor::server
