// UnixConnections: what the daemon's unix listener (server/access/unix_listener.h)
// learned of each connection it accepted and handed to gRPC — the peer's
// kernel credentials and whether it is an operator — keyed by the
// connection's fd number, which is all gRPC tells a call about a connection
// it was given by fd (its peer string is "fd:N").
//
// Why the fd number is a sound key: gRPC owns an accepted fd and keeps it
// open while its transport reads from it, and a call is identified when it
// starts, right after its headers were read from that fd. A number is
// recorded again (replacing the old entry) only after the kernel handed it
// out again, i.e. after the old connection was closed. The one window left
// — a connection closed between a call's headers and its identification,
// its number reused by a new connection at once — can only misname a call
// whose client is gone: nothing more is read from or written to it. Each
// entry also keeps the socket's inode, and Find checks that the fd still
// is that socket, so a number reused for anything else (a file, a memfd)
// is never mistaken for a client.
//
// Thread-safety: all methods may be called concurrently (one mutex).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>

#include "core/base/mutex.h"
#include "server/access/identity.h"

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
