// UnixListener: the daemon's gRPC unix socket, accepted by the daemon itself
// so that every connection's kernel credentials are checked before gRPC
// reads a byte of it.
//
// Why not gRPC's own unix listener: gRPC's C++ API tells a call only its
// peer's address ("unix:/run/..."), never the peer's credentials. So the
// daemon binds the socket, accepts on its own thread, reads SO_PEERCRED
// (and SO_PEERGROUPS), and asks the UnixAccessPolicy: a refused peer's
// connection is closed at once (its client sees the connection drop,
// UNAVAILABLE, before any call; logged once per uid a minute); an allowed
// one is recorded in UnixConnections and handed to the running gRPC server
// (grpc::AddInsecureChannelFromFd), after which gRPC owns the fd and its
// calls see the peer "fd:N" that PeerCredentialsIdentifier maps back to
// the credentials (server/access/peer_credentials_identifier.h).
//
// One thread runs an EpollLoop (core/base/epoll_loop.h) on the listening
// socket, so Stop() ends it promptly. It accepts through a LoopListener:
// when accept() fails for want of resources (out of fds), the socket is
// left unwatched for a growing pause (10 ms to 500 ms) instead of spinning,
// logged once per episode (core/base/accept_backoff.h).
//
// Thread-safety: Stop() and the destructor may be called from any thread;
// `on_accept` runs on the listener's thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/base/epoll_loop.h"
#include "core/base/loop_listener.h"
#include "core/base/unique_fd.h"
#include "server/access/unix_access.h"
#include "server/access/unix_connections.h"

namespace conveyor::server {

class UnixListener {
 public:
  // Takes an allowed connection (already in `connections`).
  using OnAccept = std::function<void(UniqueFd conn)>;

  // Binds `path` (which PrepareUnixSocketPath made ready) with permissions
  // `mode` and starts accepting. `connections` must outlive the listener.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Start(const std::string& path, mode_t mode,
                                                             UnixAccessPolicy policy,
                                                             UnixConnections* connections,
                                                             OnAccept on_accept);
  ~UnixListener();  // Stop()
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Stops accepting, closes the listening socket and removes its file.
  // Connections already handed over stay gRPC's. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }
  const UnixAccessPolicy& policy() const { return policy_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Refusals {
    Clock::time_point last_logged;
    uint64_t unlogged = 0;  // refused since then
  };

  UnixListener(std::string path, std::unique_ptr<EpollLoop> loop, UnixAccessPolicy policy,
               UnixConnections* connections, OnAccept on_accept);
  void Run();
  void Admit(UniqueFd conn);
  void LogRefusal(const UnixPeer& peer);

  const std::string path_;
  const std::unique_ptr<EpollLoop> loop_;
  const UnixAccessPolicy policy_;
  UnixConnections* const connections_;
  const OnAccept on_accept_;
  // Set by Start before the thread starts; the listener's thread's only
  // (closed by Stop after the thread is joined).
  std::unique_ptr<LoopListener> listener_;
  std::map<uid_t, Refusals> refusals_;
  std::thread thread_;
  bool stopped_ = false;  // Stop()'s caller only
};

}  // namespace conveyor::server
