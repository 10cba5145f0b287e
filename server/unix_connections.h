// UnixConnections: what the daemon's unix listener (server/unix_listener.h)
// learned of each connection it accepted and handed to gRPC — the peer's
// kernel credentials and whether it is an operator — keyed by the
// connection's fd number, which is all gRPC tells a call about a connection
// it was given by fd (its peer string is "fd:N").
//
// Why the fd number is a sound key: gRPC owns an accepted fd until the
// connection's transport is destroyed, which is after every call on it has
// ended, so while a call runs its fd number cannot name another
// connection. A number is recorded again (replacing the old entry) only
// after the kernel handed it out again, i.e. after the old connection was
// closed. Each entry also keeps the socket's inode: Find checks that the
// fd still is that socket, so a number gRPC closed and the process reused
// for anything else is never mistaken for a client.
//
// Thread-safety: all methods may be called concurrently (one mutex).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>

#include "core/mutex.h"
#include "server/client_identity.h"

namespace conveyor::server {

class UnixConnections {
 public:
  struct Connection {
    PeerCredentials credentials;
    bool is_operator = false;
    ino_t inode = 0;  // of the accepted socket
  };

  // Records `fd` (an accepted socket, open) before it is handed to gRPC.
  // False when `fd` is not a socket one can fstat (the caller closes it).
  bool Add(int fd, const PeerCredentials& credentials, bool is_operator);

  // The connection recorded under `fd`, if `fd` still is that socket.
  std::optional<Connection> Find(int fd) const;

  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<int, Connection> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
