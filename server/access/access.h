// The daemon's access controls, assembled from its config: the chain of
// ClientIdentifiers every call goes through (an inner identifier, then the
// TLS client certificate's name when client_ca is set, then bearer tokens
// when access.tokens is set: each wraps the one before), and the
// credentials of the TCP listener (TLS or plaintext). Daemon::Start builds
// them before anything listens; DaemonMain checks the files first so that a
// bad token or certificate file is a config error.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/access/identifier.h"
#include "server/access/listen_config.h"
#include "server/access/token_identifier.h"

namespace conveyor::server {

struct Access {
  std::unique_ptr<ClientIdentifier> identifier;
  std::shared_ptr<grpc::ServerCredentials> tcp_credentials;
  // The bearer-token link of `identifier`'s chain (owned by it), for a
  // config reload to replace its tokens (TokenIdentifier::Replace); null
  // without access.tokens.
  TokenIdentifier* tokens = nullptr;
};

// Reads the token files of `access` and checks the TLS files of `listen`.
// InvalidArgument "field access.tokens[i].file: ..." / "field listen.tls.key: ...".
absl::Status CheckAccessFiles(const ListenConfig& listen, const AccessConfig& access);

// The identifier chain over `inner` (which identifies the client first) and
// the TCP credentials of `listen`.
absl::StatusOr<Access> BuildAccess(const ListenConfig& listen, const AccessConfig& access,
                                   std::unique_ptr<ClientIdentifier> inner);

// Logs how TCP is guarded (TLS, client certificates, tokens), and warns
// when it is not although it is reachable from other hosts, when it lets
// local users around the unix socket's mode (listen.unix_mode, which never
// admits others) while TCP needs neither a token nor a client certificate
// nor an allowed uid (listen.allowed_uids / allowed_gids, which the TCP
// listener applies to connections from this host), and when the TLS
// certificate is expired or not yet valid (CertificateValidityProblem).
void LogTcpAccess(const ListenConfig& listen, const AccessConfig& access, int tcp_port);

}  // namespace conveyor::server
