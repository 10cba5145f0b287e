#include "server/transport/transport.h"

#include "absl/strings/str_format.h"

namespace conveyor::server {

bool ClientStillReads(const absl::Status& status) {
  return !absl::IsCancelled(status) && !absl::IsUnavailable(status);
}

const char* TransportName(v1::Transport kind) {
  switch (kind) {
    case v1::SHARED_MEMORY: return "shared_memory";
    case v1::INLINE: return "inline";
    case v1::DATA_SOCKET: return "data_socket";
    case v1::DEVICE_MEMORY: return "device_memory";
    default: return "auto";
  }
}

absl::StatusOr<Transport*> TransportSet::Choose(const v1::OpenStream& request,
                                                const ClientIdentity& client) const {
  if (request.transport() == v1::TRANSPORT_AUTO) {
    for (const auto& t : transports_) {
      if (t->OfferedByAuto(request, client)) return t.get();
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "no transport of this daemon can serve the client at %s", client.Describe()));
  }
  for (const auto& t : transports_) {
    if (t->kind() != request.transport()) continue;
    if (absl::Status st = t->CanServe(request, client); !st.ok()) return st;
    return t.get();
  }
  if (v1::Transport_IsValid(request.transport())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this daemon does not offer transport %s; use AUTO", TransportName(request.transport())));
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown transport %d", static_cast<int>(request.transport())));
}

}  // namespace conveyor::server
