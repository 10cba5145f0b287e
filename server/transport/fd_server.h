// FdServer: the fd hand-over socket next to the gRPC unix socket
// ("<socket>.fd"). A client of a SHARED_MEMORY stream connects and sends
// the handshake of server/transport/handshake.h (stream id and secret from
// StreamOpened); the reply is the status byte, kHandshakeAccepted with the
// stream's region memfd attached as SCM_RIGHTS ancillary data, or
// kHandshakeRefused (unknown stream or wrong secret, or a peer the lookup
// refuses: no fd). The server then closes the connection. The lookup is
// shown the connection's kernel credentials (SO_PEERCRED), so that memory
// goes only to the uid that opened the stream, whatever the peer knows.
//
// One thread serves every connection at once with epoll and non-blocking
// sockets (HandshakeAcceptor): a client that connects and stays silent is
// dropped after 5 s without delaying anyone else's hand-over; at most 128
// connections may wait to send their request (more are closed at once);
// when the process runs out of fds the thread backs off instead of
// spinning. The thread runs an EpollLoop (core/base/epoll_loop.h), so
// Stop() ends it promptly.
//
// A refused (or deferred) hand-over is logged once per peer (its uid) and
// 10 s: the first at once, the rest counted and summed up in one line per
// peer and interval (server/transport/log_throttle.h), however fast one
// client asks.
//
// Thread-safety: Stop() and the destructor may be called from any thread;
// `lookup` is called from the server's thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/base/epoll_loop.h"
#include "core/base/unique_fd.h"
#include "server/access/unix_access.h"
#include "server/transport/handshake.h"
#include "server/transport/log_throttle.h"
#include "server/transport/secret.h"

namespace conveyor::server {

class FdServer {
 public:
  // Returns the fd to hand over (the server closes its copy after sending),
  // or an error (the client gets kHandshakeRefused) for a request that
  // `peer` sent.
  using Lookup = std::function<absl::StatusOr<UniqueFd>(uint64_t stream_id, const Secret& secret,
                                                        const UnixPeer& peer)>;

  // Binds `path` (which PrepareUnixSocketPath made ready) with permissions
  // `mode` and starts serving.
  static absl::StatusOr<std::unique_ptr<FdServer>> Start(const std::string& path, mode_t mode,
                                                         Lookup lookup);
  ~FdServer();  // Stop()
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  // Stops the thread, closes the socket (and connections not served yet)
  // and removes its file. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  FdServer(std::string path, std::unique_ptr<EpollLoop> loop, Lookup lookup);
  void Run();
  // Answers a complete request (the server's thread).
  void Serve(UniqueFd conn, const HandshakeRequest& request);
  // The summaries of refusals held back (the server's thread).
  void LogHeldBackRefusals(EpollLoop::Clock::time_point now);

  const std::string path_;
  const std::unique_ptr<EpollLoop> loop_;
  const Lookup lookup_;
  // Set by Start before the thread starts; used by the thread only; reset
  // by Stop after the thread is joined.
  std::unique_ptr<HandshakeAcceptor> acceptor_;
  LogThrottle refusal_log_;  // the thread's
  std::thread thread_;
};

}  // namespace conveyor::server
