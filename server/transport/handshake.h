// The handshake of the daemon's side sockets (the fd hand-over socket of
// SHARED_MEMORY streams and the data socket of DATA_SOCKET streams), written
// once for both: the client connects, sends the 8-byte little-endian stream
// id then the 32-byte secret from StreamOpened (in one write or several),
// and reads one status byte: kHandshakeAccepted, kHandshakeRefused
// (unknown stream or wrong secret), or kHandshakeBusy (the daemon could not
// answer for want of resources, e.g. out of fds: the client may retry); after
// a refusal the server closes. What follows an
// accepted handshake is the socket's own business (an fd, batch bytes).
//
// With a TLS context (the data socket under listen.tls) each connection
// first makes a TLS handshake, driven by the same epoll events without
// blocking (SSL_accept wanting to read or to write) and bound by the same
// deadline, then sends its request inside TLS; a connection whose TLS
// handshake fails (a plaintext client, an untrusted or missing client
// certificate) is closed, logged, and holds up nobody.
//
// HandshakeAcceptor is the server side: it accepts connections on a
// listening socket and reads their requests on the owner's epoll thread,
// many at once and without blocking, so a client that connects and stays
// silent holds up no other client. It bounds what a flood can cost: at most
// `max_pending` connections may wait to send their request (more are closed
// at once) and each gets `timeout` to send it. It accepts through a
// LoopListener (core/base/loop_listener.h): when accept() fails for want of
// resources (out of fds, buffers or memory) it pauses accepting for a short,
// growing pause instead of spinning (core/base/accept_backoff.h).
//
// Thread-safety: a HandshakeAcceptor belongs to the one thread that runs
// its owner's EpollLoop; every method must be called from it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/epoll_events.h"
#include "core/base/epoll_loop.h"
#include "core/base/loop_listener.h"
#include "core/base/unique_fd.h"
#include "server/access/tls_context.h"
#include "server/transport/secret.h"

namespace conveyor::server {

inline constexpr size_t kHandshakeRequestBytes = 8 + kSecretBytes;
inline constexpr uint8_t kHandshakeAccepted = 0;
inline constexpr uint8_t kHandshakeRefused = 1;
inline constexpr uint8_t kHandshakeBusy = 2;

struct HandshakeRequest {
  uint64_t stream_id = 0;
  Secret secret{};
};

// The request in its 40 wire bytes.
HandshakeRequest DecodeHandshake(const uint8_t bytes[kHandshakeRequestBytes]);

// The acceptor's epoll events carry EventTag::kListen and kHandshake
// (core/base/epoll_events.h); owners use the others.
// "HOST:PORT" of a connected socket's peer, "pid P uid U" for a unix peer,
// "?" when unknown; for logs.
std::string PeerName(int fd);

class HandshakeAcceptor {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    std::string name;  // the socket in logs: "data socket", "fd hand-over"
    size_t max_pending = 128;
    Clock::duration timeout = std::chrono::seconds(5);
    // TLS before the request (not owned; outlives the acceptor); nullptr:
    // plaintext.
    ReloadingTlsContext* tls = nullptr;
  };
  // Called (on the loop's thread) with a connection whose request is
  // complete; the connection is no longer in the epoll set. Closing `conn`
  // refuses it without a word; the callee answers with the status byte
  // (through `tls`, the connection's TLS session, when there is one; null
  // without TLS).
  using OnRequest = std::function<void(UniqueFd conn, SslPtr tls, const HandshakeRequest& request)>;

  // Adds `listen_fd` (non-blocking, listening) to `loop` (not owned;
  // outlives the acceptor) under EventKey(kListen, 0).
  static absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> Create(EpollLoop* loop,
                                                                   UniqueFd listen_fd,
                                                                   Options options,
                                                                   OnRequest on_request);
  ~HandshakeAcceptor();  // closes the listening socket and pending connections
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  // Whether an event key (kListen, kHandshake) is the acceptor's.
  static bool Owns(uint64_t key);
  // Handles an event of the acceptor's.
  void OnEvent(uint64_t key);

  // Ends handshakes past their deadline and resumes accepting after a
  // pause; returns when it next needs to be called (nullopt: no deadline).
  std::optional<Clock::time_point> Tick(Clock::time_point now);

  size_t pending() const { return pending_.size(); }
  bool paused() const { return listener_->paused(); }

 private:
  struct Pending {
    UniqueFd fd;
    SslPtr tls;               // declared after fd: freed before it closes
    bool tls_done = false;    // the TLS handshake is complete
    bool want_write = false;  // EPOLLOUT is watched (TLS handshake)
    uint8_t request[kHandshakeRequestBytes];
    size_t got = 0;
    Clock::time_point deadline;
  };

  HandshakeAcceptor(EpollLoop* loop, Options options, OnRequest on_request);
  // A connection from the listener: pending until its request is complete.
  void Take(UniqueFd conn);
  void Read(int fd);
  // Drives the TLS handshake then reads the request inside TLS; false when
  // the connection was dropped.
  bool ReadTls(int fd, Pending& p);
  void WatchWritable(int fd, Pending& p, bool writable);

  EpollLoop* const loop_;
  const Options options_;
  const OnRequest on_request_;

  // Declared after pending_: destroyed (the listening socket closed) first.
  std::map<int, Pending> pending_;
  std::unique_ptr<LoopListener> listener_;
  bool refusing_ = false;  // max_pending reached (logged once until it is not)
};

}  // namespace conveyor::server
