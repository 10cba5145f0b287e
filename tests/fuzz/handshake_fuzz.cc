// Fuzz target: bytes as what a client sends on a side socket (the data
// socket, the fd hand-over socket) before its handshake is answered, read
// by the real HandshakeAcceptor (server/transport/handshake.h) on an EpollLoop, over
// a real unix socket (abstract address, no file): the client writes the
// bytes in pieces, the loop runs after each piece until it is idle, then
// the client optionally closes. The owner's side answers as the daemon's
// does: accepted when the stream id and secret are the registered ones
// (stream 7, secret 0x00..0x1f), refused otherwise.
//
// Input: byte 0 is the plan (bit 0: the client closes after sending; the
// other bits seed the piece sizes, 1..41 bytes); the rest (at most 4 KiB)
// is sent.
// Properties: no sanitizer report; the request reaches the owner exactly
// when 40 bytes were sent, decoded from exactly those bytes; the client's
// answer byte says accepted exactly for the registered stream and secret;
// nothing stays pending once the client has closed or its time is up.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "core/base/epoll_loop.h"
#include "core/base/unique_fd.h"
#include "server/transport/handshake.h"
#include "server/transport/secret.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_target.h"

namespace conveyor::fuzz {
namespace {

using server::HandshakeAcceptor;
using server::HandshakeRequest;
using server::kHandshakeRequestBytes;

constexpr uint64_t kStreamId = 7;

server::Secret RegisteredSecret() {
  server::Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(i);
  return s;
}

struct Loop {
  std::unique_ptr<EpollLoop> epoll;
  sockaddr_un addr{};
  socklen_t addr_len = 0;
  std::unique_ptr<HandshakeAcceptor> acceptor;
  // What the owner saw of the last input.
  int requests = 0;
  HandshakeRequest last{};

  // Runs the loop until no event is ready.
  void RunUntilIdle() {
    while (true) {
      absl::StatusOr<int> n = epoll->RunOnce(0, [this](uint64_t key, uint32_t /*events*/) {
        FUZZ_CHECK(HandshakeAcceptor::Owns(key));
        acceptor->OnEvent(key);
      });
      FUZZ_CHECK(n.ok());
      if (*n == 0) return;
    }
  }
};

Loop* MakeLoop() {
  auto* loop = new Loop;  // lives as long as the process
  absl::StatusOr<std::unique_ptr<EpollLoop>> epoll = EpollLoop::Create("fuzzed socket");
  FUZZ_CHECK(epoll.ok());
  loop->epoll = *std::move(epoll);
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  FUZZ_CHECK(static_cast<bool>(listener));
  loop->addr.sun_family = AF_UNIX;
  const std::string name = "conveyor-handshake-fuzz-" + std::to_string(::getpid());
  std::memcpy(loop->addr.sun_path + 1, name.data(), name.size());  // abstract: sun_path[0] == 0
  loop->addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  FUZZ_CHECK(::bind(listener.get(), reinterpret_cast<sockaddr*>(&loop->addr), loop->addr_len) == 0);
  FUZZ_CHECK(::listen(listener.get(), 16) == 0);
  HandshakeAcceptor::Options options;
  options.name = "fuzzed socket";
  auto acceptor = HandshakeAcceptor::Create(
      loop->epoll.get(), std::move(listener), options,
      [loop](UniqueFd conn, server::SslPtr /*tls: none here*/, const HandshakeRequest& request) {
        ++loop->requests;
        loop->last = request;
        const bool ok = request.stream_id == kStreamId &&
                        server::ConstantTimeEqual(request.secret, RegisteredSecret());
        const uint8_t answer = ok ? server::kHandshakeAccepted : server::kHandshakeRefused;
        FUZZ_CHECK(::send(conn.get(), &answer, 1, MSG_NOSIGNAL) == 1);
      });
  FUZZ_CHECK(acceptor.ok());
  loop->acceptor = *std::move(acceptor);
  return loop;
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // a warning per short handshake otherwise
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  static fuzz::Loop* const loop = fuzz::MakeLoop();
  if (size == 0) return 0;
  const uint8_t plan = data[0];
  const bool close_after = (plan & 1) != 0;
  const uint8_t* bytes = data + 1;
  const size_t n = std::min<size_t>(size - 1, 4096);
  loop->requests = 0;

  UniqueFd client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  FUZZ_CHECK(static_cast<bool>(client));
  FUZZ_CHECK(::connect(client.get(), reinterpret_cast<sockaddr*>(&loop->addr), loop->addr_len) ==
             0);
  loop->RunUntilIdle();
  uint64_t piece_seed = fuzz::HashBytes(&plan, 1);
  for (size_t sent = 0; sent < n;) {
    const size_t piece = std::min<size_t>(n - sent, 1 + piece_seed % 41);
    piece_seed = piece_seed * 6364136223846793005ull + 1442695040888963407ull;
    // The acceptor stops reading after 40 bytes; what follows stays queued.
    const ssize_t w = ::send(client.get(), bytes + sent, piece, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) break;  // the server closed after answering
    sent += static_cast<size_t>(w);
    loop->RunUntilIdle();
  }
  if (close_after) ::shutdown(client.get(), SHUT_WR);
  loop->RunUntilIdle();

  if (n >= server::kHandshakeRequestBytes) {
    FUZZ_CHECK(loop->requests == 1);
    uint64_t id = 0;
    for (int i = 7; i >= 0; --i) id = (id << 8) | bytes[i];
    FUZZ_CHECK(loop->last.stream_id == id);
    FUZZ_CHECK(std::memcmp(loop->last.secret.data(), bytes + 8, server::kSecretBytes) == 0);
    const bool registered =
        id == fuzz::kStreamId &&
        std::memcmp(bytes + 8, fuzz::RegisteredSecret().data(), server::kSecretBytes) == 0;
    uint8_t answer = 0xff;
    FUZZ_CHECK(::recv(client.get(), &answer, 1, MSG_DONTWAIT) == 1);
    FUZZ_CHECK(answer == (registered ? server::kHandshakeAccepted : server::kHandshakeRefused));
    FUZZ_CHECK(loop->acceptor->pending() == 0);
    return 0;
  }
  FUZZ_CHECK(loop->requests == 0);
  if (close_after) {
    FUZZ_CHECK(loop->acceptor->pending() == 0);
  } else {
    FUZZ_CHECK(loop->acceptor->pending() == 1);
    // The client stays silent: its time runs out.
    loop->acceptor->Tick(server::HandshakeAcceptor::Clock::now() + std::chrono::seconds(6));
    FUZZ_CHECK(loop->acceptor->pending() == 0);
  }
  return 0;
}
