// Tests of the fd hand-over socket (server/transport/fd_server.h) with real unix
// sockets in a temporary folder: the hand-over and its refusal, clients
// served at once whatever other connections do (a silent one, a flood), and
// running out of file descriptors (the server backs off instead of spinning
// and serves again once fds are free). Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "server/transport/fd_server.h"
#include "tests/unit/eventually.h"
#include "tests/unit/socket_test_util.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

using testing::Eventually;

using testing::ConnectUnix;
using testing::PeerClosed;
using testing::RequestRegion;

Secret MakeSecret(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 3 + i);
  return s;
}

constexpr uint64_t kStream = 77;
constexpr uint64_t kBusyStream = 99;  // its lookup fails as if out of fds

// A server on a fresh socket path whose only stream is kStream (secret 1),
// with a memfd of 4096 bytes whose first byte is 0x5a.
struct Fixture {
  Fixture() {
    region.Reset(::memfd_create("fd-server-test", MFD_CLOEXEC));
    REQUIRE(region.valid());
    REQUIRE(::ftruncate(region.get(), 4096) == 0);
    const uint8_t mark = 0x5a;
    REQUIRE(::pwrite(region.get(), &mark, 1, 0) == 1);
    path = dir.Sub("conveyor.sock.fd");
    threads_before = testing::ThreadIds();
    auto started =
        FdServer::Start(path, 0600,
                        [this](uint64_t id, const Secret& secret,
                               const UnixPeer& peer) -> absl::StatusOr<UniqueFd> {
                          ++lookups;
                          last_peer_pid = peer.credentials.pid;
                          last_peer_uid = peer.credentials.uid;
                          if (id == kBusyStream)
                            return PosixError("dup of the region memfd", EMFILE);
                          if (id != kStream || secret != MakeSecret(1)) {
                            return absl::PermissionDeniedError("unknown stream or wrong secret");
                          }
                          UniqueFd dup(::fcntl(region.get(), F_DUPFD_CLOEXEC, 0));
                          if (!dup) return absl::InternalError("dup");
                          return dup;
                        });
    REQUIRE(started.ok());
    server = *std::move(started);
  }

  // The server's thread (the one Start added, by its name).
  pid_t ServerThread() const { return testing::NewThreadNamed(threads_before, "conveyor-fd"); }

  testing::TempDir dir;
  UniqueFd region;
  std::string path;
  std::set<pid_t> threads_before;
  std::atomic<int> lookups{0};
  std::atomic<pid_t> last_peer_pid{0};
  std::atomic<uid_t> last_peer_uid{12345};
  std::unique_ptr<FdServer> server;
};

bool IsTheRegion(const UniqueFd& fd) {
  uint8_t b = 0;
  return fd.valid() && ::pread(fd.get(), &b, 1, 0) == 1 && b == 0x5a;
}

TEST_CASE("fd server: the right secret gets the region, a wrong one nothing", "[fd_server]") {
  Fixture t;
  {
    UniqueFd conn = ConnectUnix(t.path);
    REQUIRE(conn.valid());
    testing::HandOverReply r = RequestRegion(conn.get(), kStream, MakeSecret(1));
    CHECK(r.status == 0);
    CHECK(IsTheRegion(r.fd));
    // The lookup was shown who asked, as the kernel knows it.
    CHECK(t.last_peer_pid == ::getpid());
    CHECK(t.last_peer_uid == ::getuid());
  }
  for (auto [id, seed] : {std::pair<uint64_t, uint8_t>{kStream, 2}, {kStream + 1, 1}}) {
    UniqueFd conn = ConnectUnix(t.path);
    REQUIRE(conn.valid());
    testing::HandOverReply r = RequestRegion(conn.get(), id, MakeSecret(seed));
    CHECK(r.status == 1);
    CHECK_FALSE(r.fd.valid());
  }
  // A lookup that failed for want of fds is no refusal: the client may retry.
  {
    UniqueFd conn = ConnectUnix(t.path);
    REQUIRE(conn.valid());
    testing::HandOverReply r = RequestRegion(conn.get(), kBusyStream, MakeSecret(1));
    CHECK(r.status == 2);
    CHECK_FALSE(r.fd.valid());
  }
  // The request may come in pieces (it is a stream socket).
  UniqueFd conn = ConnectUnix(t.path);
  const std::vector<uint8_t> req = testing::HandshakeBytes(kStream, MakeSecret(1));
  for (size_t i = 0; i < req.size(); i += 7) {
    const size_t n = std::min<size_t>(7, req.size() - i);
    REQUIRE(::send(conn.get(), req.data() + i, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n));
  }
  testing::HandOverReply r = testing::ReadHandOverReply(conn.get());
  CHECK(r.status == 0);
  CHECK(IsTheRegion(r.fd));
}

TEST_CASE("fd server: a silent client does not delay another client's hand-over", "[fd_server]") {
  Fixture t;
  UniqueFd silent = ConnectUnix(t.path);
  REQUIRE(silent.valid());
  const std::vector<uint8_t> part = testing::HandshakeBytes(kStream, MakeSecret(1));
  REQUIRE(::send(silent.get(), part.data(), 5, MSG_NOSIGNAL) == 5);  // then nothing
  UniqueFd conn = ConnectUnix(t.path);
  REQUIRE(conn.valid());
  testing::HandOverReply r = RequestRegion(conn.get(), kStream, MakeSecret(1));
  CHECK(r.status == 0);
  CHECK(IsTheRegion(r.fd));
  // Served while the silent one still waits for its handshake: the server
  // did not have to give up on it first.
  CHECK_FALSE(PeerClosed(silent.get()));
}

TEST_CASE("fd server: a flood of silent connections is bounded and blocks no hand-over",
          "[fd_server]") {
  Fixture t;
  // Fewer than the listen backlog, so that connect() never waits for the server.
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 60; ++i) {
    idle.push_back(ConnectUnix(t.path));
    REQUIRE(idle.back().valid());
  }
  UniqueFd conn = ConnectUnix(t.path);
  REQUIRE(conn.valid());
  testing::HandOverReply r = RequestRegion(conn.get(), kStream, MakeSecret(1));
  CHECK(r.status == 0);
  CHECK(IsTheRegion(r.fd));
  int still_open = 0;
  for (const UniqueFd& fd : idle) still_open += PeerClosed(fd.get()) ? 0 : 1;
  CHECK(still_open == 60);  // nobody was dropped to make room
  CHECK(t.lookups == 1);
}

TEST_CASE("fd server: out of file descriptors it backs off, then serves again",
          "[fd_server][emfile]") {
  Fixture t;
  const pid_t tid = t.ServerThread();
  REQUIRE(tid > 0);
  // Made before the process runs out: connecting needs no new fd here.
  UniqueFd conn(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(conn.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, t.path.c_str(), sizeof(addr.sun_path) - 1);
  const long busy_ticks = testing::CpuTicksWhileOutOfFds(
      tid, conn.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  REQUIRE(busy_ticks >= 0);
  const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  INFO("server thread CPU over 1 s: " << busy_ticks << " of " << ticks_per_second << " ticks");
  CHECK(busy_ticks <= ticks_per_second / 10);
  // Fds are free again: the waiting connection is served.
  testing::SetRecvTimeout(conn.get(), 10);
  testing::HandOverReply r = RequestRegion(conn.get(), kStream, MakeSecret(1));
  CHECK(r.status == 0);
  CHECK(IsTheRegion(r.fd));
}

TEST_CASE("fd server: Stop ends the thread and removes the socket file", "[fd_server]") {
  Fixture t;
  UniqueFd pending = ConnectUnix(t.path);
  t.server->Stop();
  CHECK(::access(t.path.c_str(), F_OK) != 0);
  CHECK(Eventually([&] { return PeerClosed(pending.get()); }));
  t.server->Stop();  // idempotent
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
