// TLS of the gRPC TCP listener (listen.tls): the server credentials, built
// on gRPC's file-watching certificate provider so that renewed certificate,
// key and client-CA files are picked up without a restart (checked every
// listen.tls.reload_interval_seconds; connections made before keep their
// session). The files are checked with OpenSSL first, so a bad one stops
// the daemon at start with the field named instead of failing every
// handshake later.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/access/tls_config.h"

namespace conveyor::server {

// Whether the files of `tls` can serve: the certificate chain and the key
// parse as PEM and belong together; client_ca (when set) holds at least one
// certificate. InvalidArgument naming the field (listen.tls.cert, ...).
absl::Status CheckTlsFiles(const TlsConfig& tls);

// Server credentials for `tls` (CheckTlsFiles first). With client_ca,
// client certificates are verified when sent (required with
// require_client_cert).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTlsServerCredentials(
    const TlsConfig& tls);

}  // namespace conveyor::server
