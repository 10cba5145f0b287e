// OpenClientTransport: the one place the C++ client chooses a transport
// object for a stream — the one StreamOpened names (see client_transport.h).
//
// Thread-safety: a free function; the object it returns has one owner.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "client/cpp/transport/client_transport.h"

namespace conveyor::client {

// Opens the transport `opened` names. INTERNAL protocol error when its
// details do not match its transport or it names none the client knows;
// INVALID_ARGUMENT when options ask for pinned memory on a stream without
// shared memory; the transport's own errors otherwise.
absl::StatusOr<std::unique_ptr<ClientTransport>> OpenClientTransport(
    const v1::StreamOpened& opened, const TransportOptions& options);

}  // namespace conveyor::client
