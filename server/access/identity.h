// ClientIdentity: who is on the other end of a call — how it reached the
// daemon, and what the daemon knows or was shown about it. The gRPC adapter
// builds one per call (from the peer address, and from what the listener
// learned: a unix connection's kernel credentials, a bearer token or client
// certificate that authenticated it); the service and the transports read
// it to decide what this client may open and how its batches can reach it.
//
// Thread-safety: a plain value; immutable once built.
#pragma once

#include <sys/types.h>

#include <optional>
#include <set>
#include <string>

namespace conveyor::server {

// A unix peer's credentials as the kernel reported them (SO_PEERCRED) when
// it connected.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

struct ClientIdentity {
  enum class Via { kUnix, kTcp };

  Via via = Via::kTcp;
  // gRPC's peer string ("unix:/run/…", "ipv4:10.0.0.1:5000", "ipv6:[::1]:5"),
  // for logs and stats.
  std::string peer;
  // The unix connection's credentials, when the listener checked them.
  std::optional<PeerCredentials> credentials;
  // The name the client authenticated as (a token's name, a certificate's
  // subject); "" when it did not.
  std::string principal;
  // The pipelines it may open; unset: every pipeline.
  std::optional<std::set<std::string>> allowed_pipelines;
  // Whether it may see every client's streams in GetStats (the daemon's
  // operators), not only its own.
  bool is_operator = false;
  // Its share of the workers' CPU under contention, from the token it
  // presented (access.tokens[i].weight); 0: the daemon's per_client.weight.
  double weight = 0;

  // Builds the identity of a client known only by gRPC's peer string: unix
  // when it starts with "unix:".
  static ClientIdentity FromPeer(std::string peer);

  bool is_unix() const { return via == Via::kUnix; }
  // Whether it may open `pipeline`.
  bool MayOpen(const std::string& pipeline) const;
  // Who a client is for per-client accounting and for telling its streams
  // from others': "principal:NAME" when it authenticated, else "uid:N" for
  // a unix client with credentials, else "host:ADDR" (the peer without its
  // port) — so every connection of one user or host counts as one client.
  std::string LimitKey() const;
  // Whether GetStats shows this client the streams `owner` opened: an
  // operator sees every stream, anyone else only those of its LimitKey.
  bool SeesStreamsOf(const ClientIdentity& owner) const;
  // For log lines: the peer, then what is known of it, e.g.
  // "unix:/run/conveyor/conveyor.sock (pid 812, uid 1000)" or
  // "ipv4:10.0.0.7:53122 (token 'trainer')". Client-supplied parts escaped.
  std::string Describe() const;
};

}  // namespace conveyor::server
