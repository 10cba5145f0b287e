// conveyord --probe: asks a running daemon's gRPC health service (gRPC's
// own grpc.health.v1.Health, called through its generated client stub)
// whether it is SERVING; for container and Kubernetes probes. Plaintext
// only (a TLS listener is probed through the unix socket).
//
// Thread-safety: a free function without shared state.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace conveyor::server {

// Asks the health service at `target` (e.g.
// unix:///run/conveyor/conveyor.sock) about the whole server (service "").
// OK when it is SERVING; Unavailable naming the target otherwise: the call
// failed (no daemon, deadline of `timeout_seconds` passed) or the daemon
// answered another status (NOT_SERVING while it shuts down).
absl::Status Probe(const std::string& target, double timeout_seconds = 3.0);

}  // namespace conveyor::server
