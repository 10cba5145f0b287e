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

#include <ctime>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/access/tls_config.h"

namespace conveyor::server {

// Whether the files of `tls` can serve: the certificate chain and the key
// parse as PEM and belong together; client_ca (when set) holds at least one
// certificate. InvalidArgument naming the field (listen.tls.cert, ...).
absl::Status CheckTlsFiles(const TlsConfig& tls);

// "" when the (first) certificate of `tls.cert` is valid at `now`; else
// what is wrong, naming the file and the dates: "listen.tls.cert 'F'
// expired on DATE" / "... is not valid before DATE" (or that it cannot be
// read). Such a certificate is not refused: the daemon warns at start, on
// SIGHUP and when the data socket reloads its TLS files (a renewal may be on
// its way, and the unix socket serves regardless), and TLS clients fail
// their handshake meanwhile.
std::string CertificateValidityProblem(const TlsConfig& tls, time_t now);

// Logs CertificateValidityProblem(tls, now) as a warning, prefixed by
// `when` ("at start"), if there is one. Returns whether it warned.
bool WarnIfCertificateNotValid(const TlsConfig& tls, const char* when);

// Server credentials for `tls` (CheckTlsFiles first). With client_ca,
// client certificates are verified when sent (required with
// require_client_cert).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeTlsServerCredentials(
    const TlsConfig& tls);

}  // namespace conveyor::server
