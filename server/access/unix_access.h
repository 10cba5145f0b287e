// UnixAccess: who may use the daemon's unix sockets (the gRPC socket and
// its ".fd" sibling) and who among them is an operator, decided from the
// kernel's credentials of each connection (SO_PEERCRED, and the peer's
// supplementary groups from SO_PEERGROUPS) rather than from anything the
// client sends.
//
// The rules (config/README.md, listen.allowed_* and listen.operator_*):
// - root and the daemon's own uid are always allowed and always operators;
// - with allowed_uids and allowed_gids both empty, anyone the socket file's
//   mode lets connect is allowed; otherwise a peer is allowed when its uid
//   is listed, or its primary gid or one of its groups is;
// - operators (who see every client's streams in GetStats) are root, the
//   daemon's uid, and the peers matching operator_uids / operator_gids.
//
// Thread-safety: UnixAccessPolicy is immutable after construction; the
// free functions keep no state.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/access/identity.h"
#include "server/access/listen_config.h"

namespace conveyor::server {

// A unix peer as the kernel reports it.
struct UnixPeer {
  PeerCredentials credentials;
  std::vector<gid_t> groups;  // supplementary groups (may be empty)
};

// The credentials of the peer of the connected unix socket `fd`.
absl::StatusOr<UnixPeer> ReadUnixPeer(int fd);

// A local user known by uid only (a loopback TCP connection's owner): its
// primary and supplementary groups from the user database (none when the
// uid has no entry); pid 0.
UnixPeer PeerOfUid(uid_t uid);

class UnixAccessPolicy {
 public:
  UnixAccessPolicy() : UnixAccessPolicy({}, {}, {}, {}, ::geteuid()) {}
  UnixAccessPolicy(std::set<uid_t> allowed_uids, std::set<gid_t> allowed_gids,
                   std::set<uid_t> operator_uids, std::set<gid_t> operator_gids, uid_t daemon_uid);

  bool Allows(const UnixPeer& peer) const;
  bool IsOperator(const UnixPeer& peer) const;
  // For the start-up log: "anyone the socket mode admits" or "uids [..],
  // gids [..]" (root and the daemon's uid implied).
  std::string Describe() const;

 private:
  static bool Matches(const UnixPeer& peer, const std::set<uid_t>& uids,
                      const std::set<gid_t>& gids);

  const std::set<uid_t> allowed_uids_;
  const std::set<gid_t> allowed_gids_;
  const std::set<uid_t> operator_uids_;
  const std::set<gid_t> operator_gids_;
  const uid_t daemon_uid_;
};

// Resolves the user and group names of `listen`'s allowed_* and operator_*
// fields (numbers are taken as they are) through the system's user
// database. InvalidArgument naming the field and the unknown name.
absl::StatusOr<UnixAccessPolicy> ResolveUnixAccess(const ListenConfig& listen);

}  // namespace conveyor::server
