// ClientIdentifier: how the gRPC adapter learns who each call's client is
// (server/access/identity.h) before the service sees the call. This base
// knows a client by its peer address alone and authenticates nobody; the
// daemon's access controls (unix peer credentials, bearer tokens, client
// certificates) refine it. Identify runs on gRPC's threads once per call.
//
// Thread-safety: Identify is const and may run concurrently; subclasses
// keep it so.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/access/identity.h"

namespace conveyor::server {

class ClientIdentifier {
 public:
  virtual ~ClientIdentifier() = default;

  // The identity of the client of `context`'s call, or the status to refuse
  // the call with (UNAUTHENTICATED: no valid credentials; PERMISSION_DENIED:
  // valid, but not allowed here). The message never quotes a secret.
  virtual absl::StatusOr<ClientIdentity> Identify(const grpc::ServerContextBase& context) const {
    return ClientIdentity::FromPeer(context.peer());
  }
};

}  // namespace conveyor::server
