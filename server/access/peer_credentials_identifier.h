// PeerCredentialsIdentifier: the ClientIdentifier of a daemon whose unix
// socket is accepted by server/access/unix_listener.h. A call on a connection the
// listener handed to gRPC has the peer "fd:N"; this identifier finds the
// credentials the listener recorded for fd N (server/access/unix_connections.h)
// and makes the call's identity a unix client with those credentials
// (peer "unix:<socket path>", is_operator as the access policy said).
// Calls on other connections (TCP) are identified by `others`.
//
// A call on an "fd:" connection with nothing recorded is refused
// (UNAUTHENTICATED): it cannot happen while the listener records every
// connection before handing it over, and if it did, nobody could say who
// the client is.
//
// Thread-safety: Identify is const and may run concurrently.
#pragma once

#include <memory>
#include <string>

#include "server/access/identifier.h"
#include "server/access/unix_connections.h"

namespace conveyor::server {

class PeerCredentialsIdentifier : public ClientIdentifier {
 public:
  // `connections` must outlive the identifier.
  PeerCredentialsIdentifier(const UnixConnections* connections, std::string unix_path,
                            std::unique_ptr<ClientIdentifier> others);

  absl::StatusOr<ClientIdentity> Identify(const grpc::ServerContextBase& context) const override;

  // The identity of a call whose gRPC peer string is `peer` if it is an
  // "fd:N" connection; nullopt for any other peer. (Identify's core, for
  // tests.)
  std::optional<absl::StatusOr<ClientIdentity>> IdentifyFdPeer(const std::string& peer) const;

 private:
  const UnixConnections* const connections_;
  const std::string unix_path_;
  const std::unique_ptr<ClientIdentifier> others_;
};

}  // namespace conveyor::server
