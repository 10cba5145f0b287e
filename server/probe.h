// conveyord --probe: asks a running daemon's gRPC health service
// (grpc.health.v1.Health/Check) whether it is SERVING; for container and
// Kubernetes probes. Plaintext only (a TLS listener is probed through the
// unix socket).
//
// Thread-safety: a free function without shared state.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace conveyor::server {

// Asks the health service at `target` (e.g.
// unix:///run/conveyor/conveyor.sock) whether the daemon is SERVING. OK
// when it is, Unavailable otherwise.
absl::Status Probe(const std::string& target, double timeout_seconds = 3.0);

}  // namespace conveyor::server
