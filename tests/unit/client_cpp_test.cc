// Tests of the C++ client's pieces that stand alone (client/cpp): address
// parsing, the region mapping's bounds, the fd hand-over against the
// daemon's real fd server, and the data-socket handshake and reads against
// a loopback listener. The whole client against a real daemon is
// tests/integration/test_cpp_client.py.
#if defined(CONVEYOR_HAVE_SERVER) && defined(CONVEYOR_HAVE_CLIENT)

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "client/cpp/address.h"
#include "client/cpp/mapped_region.h"
#include "client/cpp/side_socket.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "server/transport/fd_server.h"
#include "tests/unit/socket_test_util.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::client {
namespace {

std::string SecretBytes(uint8_t seed) {
  std::string s(kSecretBytes, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(seed * 3 + i);
  return s;
}

// A memfd of `size` bytes whose first byte is 0x5a.
UniqueFd MarkedMemfd(size_t size) {
  UniqueFd fd(::memfd_create("client-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::ftruncate(fd.get(), static_cast<off_t>(size)) == 0);
  const uint8_t mark = 0x5a;
  REQUIRE(::pwrite(fd.get(), &mark, 1, 0) == 1);
  return fd;
}

TEST_CASE("client address: targets and data-socket hosts", "[client_cpp]") {
  CHECK(GrpcTarget("").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(*GrpcTarget("/run/c.sock") == "unix:///run/c.sock");
  CHECK(*GrpcTarget("localhost:7000") == "localhost:7000");
  CHECK(TcpHost("unix:///run/c.sock") == std::nullopt);
  CHECK(TcpHost("/run/c.sock") == std::nullopt);
  CHECK(TcpHost("unix-abstract:c") == std::nullopt);
  CHECK(TcpHost("127.0.0.1:7000") == "127.0.0.1");
  CHECK(TcpHost("dns:///node-3:7000") == "node-3");
  CHECK(TcpHost("ipv6:[::1]:7000") == "::1");
  CHECK(TcpHost("[fe80::1]:7000") == "fe80::1");
  CHECK(TcpHost("ipv4:10.0.0.1:7000,10.0.0.2:7000") == "10.0.0.1");
}

TEST_CASE("mapped region: bounds are checked, the mapping moves and unmaps", "[client_cpp]") {
  UniqueFd fd = MarkedMemfd(4096);
  CHECK(MappedRegion::Map(fd.get(), 8192).status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(MappedRegion::Map(fd.get(), 0).status().code() == absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<MappedRegion> region = MappedRegion::Map(fd.get(), 4096);
  REQUIRE(region.ok());
  fd.Reset();  // the mapping keeps the memory
  REQUIRE(region->Bytes(0, 1).ok());
  CHECK(**region->Bytes(0, 1) == 0x5a);
  CHECK(region->Bytes(4000, 96).ok());
  CHECK(region->Bytes(4000, 97).status().code() == absl::StatusCode::kOutOfRange);
  CHECK(region->Bytes(std::numeric_limits<uint64_t>::max(), 2).status().code() ==
        absl::StatusCode::kOutOfRange);
  CHECK(region->Bytes(2, std::numeric_limits<uint64_t>::max()).status().code() ==
        absl::StatusCode::kOutOfRange);
  MappedRegion moved = std::move(*region);
  CHECK_FALSE(region->mapped());
  CHECK(moved.mapped());
  CHECK(**moved.Bytes(0, 1) == 0x5a);
}

TEST_CASE("fd hand-over: the region, a refusal and a busy daemon", "[client_cpp]") {
  testing::TempDir dir;
  UniqueFd memfd = MarkedMemfd(4096);
  const std::string path = dir.Sub("c.sock.fd");
  auto server = server::FdServer::Start(
      path, 0600,
      [&](uint64_t id, const server::Secret& secret,
          const server::UnixPeer&) -> absl::StatusOr<UniqueFd> {
        if (id == 99) return PosixError("dup of the region memfd", EMFILE);
        if (id != 7 || std::memcmp(secret.data(), SecretBytes(1).data(), kSecretBytes) != 0) {
          return absl::PermissionDeniedError("unknown stream or wrong secret");
        }
        return UniqueFd(::fcntl(memfd.get(), F_DUPFD_CLOEXEC, 0));
      });
  REQUIRE(server.ok());

  absl::StatusOr<UniqueFd> got = ReceiveRegionFd(path, 7, SecretBytes(1), absl::Seconds(10));
  REQUIRE(got.ok());
  absl::StatusOr<MappedRegion> region = MappedRegion::Map(got->get(), 4096);
  REQUIRE(region.ok());
  CHECK(**region->Bytes(0, 1) == 0x5a);

  absl::Status refused = ReceiveRegionFd(path, 7, SecretBytes(2), absl::Seconds(10)).status();
  CHECK(refused.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.message()), Catch::Contains("refused stream 7"));
  absl::Status busy = ReceiveRegionFd(path, 99, SecretBytes(1), absl::Seconds(10)).status();
  CHECK(busy.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(busy.message()), Catch::Contains("out of resources"));
  absl::Status absent =
      ReceiveRegionFd(dir.Sub("none.fd"), 7, SecretBytes(1), absl::Seconds(10)).status();
  CHECK(absent.code() == absl::StatusCode::kUnavailable);
  CHECK(ReceiveRegionFd(path, 7, "short", absl::Seconds(10)).status().code() ==
        absl::StatusCode::kInternal);
}

// A loopback TCP listener that accepts one connection, reads the 40-byte
// request into `request`, answers `reply` (nothing if empty) and closes.
struct OneShotListener {
  explicit OneShotListener(std::string reply_bytes) : reply(std::move(reply_bytes)) {
    listen_fd.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(listen_fd.valid());
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listen_fd.get(), 4) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port = ntohs(addr.sin_port);
    thread = std::thread([this] {
      UniqueFd conn(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) return;
      testing::SetRecvTimeout(conn.get(), 10);
      request.resize(8 + kSecretBytes);
      got = ReadFull(conn.get(), request.data(), request.size(), "test").ok();
      if (!reply.empty()) ::send(conn.get(), reply.data(), reply.size(), MSG_NOSIGNAL);
    });
  }
  ~OneShotListener() { Join(); }
  void Join() {
    if (thread.joinable()) thread.join();
  }

  std::string reply;
  UniqueFd listen_fd;
  uint32_t port = 0;
  std::vector<uint8_t> request;
  bool got = false;
  std::thread thread;
};

TEST_CASE("data socket: handshake, batch bytes, a short read", "[client_cpp]") {
  std::optional<OneShotListener> server;
  server.emplace(std::string("\0hello", 6));
  absl::StatusOr<UniqueFd> conn =
      ConnectDataSocket("127.0.0.1", server->port, 0x0102030405060708, SecretBytes(1),
                        absl::Seconds(10), absl::Seconds(10));
  REQUIRE(conn.ok());
  uint8_t buf[8] = {};
  REQUIRE(ReadFull(conn->get(), buf, 5, "data socket").ok());
  CHECK(std::string(reinterpret_cast<char*>(buf), 5) == "hello");
  absl::Status short_read = ReadFull(conn->get(), buf, 3, "data socket");
  server->Join();
  CHECK(server->got);
  CHECK(short_read.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(short_read.message()), Catch::Contains("closed after 0 of 3 bytes"));
}

TEST_CASE("data socket: the handshake's request bytes are the stream id and secret",
          "[client_cpp]") {
  std::vector<uint8_t> request;
  bool got = false;
  {
    OneShotListener server(std::string("\0", 1));
    REQUIRE(ConnectDataSocket("localhost", server.port, 0x0102030405060708, SecretBytes(1),
                              absl::Seconds(10), absl::Seconds(10))
                .ok());
    server.Join();
    request = server.request;
    got = server.got;
  }
  REQUIRE(got);
  const std::vector<uint8_t> want = testing::HandshakeBytes(0x0102030405060708, SecretBytes(1));
  CHECK(request == want);
}

TEST_CASE("data socket: refusals and an absent daemon are errors", "[client_cpp]") {
  uint32_t port = 0;
  {
    OneShotListener server(std::string("\x01", 1));
    port = server.port;
    absl::Status refused = ConnectDataSocket("127.0.0.1", server.port, 5, SecretBytes(1),
                                             absl::Seconds(10), absl::Seconds(10))
                               .status();
    CHECK(refused.code() == absl::StatusCode::kFailedPrecondition);
  }
  {
    OneShotListener server("");  // closes without a word
    absl::Status closed = ConnectDataSocket("127.0.0.1", server.port, 5, SecretBytes(1),
                                            absl::Seconds(10), absl::Seconds(10))
                              .status();
    CHECK(closed.code() == absl::StatusCode::kUnavailable);
    CHECK_THAT(std::string(closed.message()), Catch::Contains("closed the connection"));
  }
  // The listener is gone: nothing accepts on its port any more.
  absl::Status absent =
      ConnectDataSocket("127.0.0.1", port, 5, SecretBytes(1), absl::Seconds(10), absl::Seconds(10))
          .status();
  CHECK(absent.code() == absl::StatusCode::kUnavailable);
  CHECK(ConnectDataSocket("127.0.0.1", 0, 5, SecretBytes(1), absl::Seconds(1), absl::Seconds(1))
            .status()
            .code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace conveyor::client

#endif  // CONVEYOR_HAVE_SERVER && CONVEYOR_HAVE_CLIENT
