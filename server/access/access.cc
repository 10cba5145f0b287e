#include "server/access/access.h"

#include "absl/strings/str_cat.h"
#include "server/access/certificate_identifier.h"
#include "server/access/tls_credentials.h"
#include "server/access/token_identifier.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

absl::Status CheckAccessFiles(const ListenConfig& listen, const AccessConfig& access) {
  if (!access.tokens.empty()) {
    absl::StatusOr<std::unique_ptr<TokenIdentifier>> tokens =
        TokenIdentifier::Create(access, std::make_unique<ClientIdentifier>());
    if (!tokens.ok()) return tokens.status();
  }
  if (listen.tls.enabled() && !listen.tcp.empty()) {
    return CheckTlsFiles(listen.tls);
  }
  return absl::OkStatus();
}

absl::StatusOr<Access> BuildAccess(const ListenConfig& listen, const AccessConfig& access,
                                   std::unique_ptr<ClientIdentifier> inner) {
  Access a{std::move(inner), grpc::InsecureServerCredentials()};
  const TlsConfig& tls = listen.tls;
  if (tls.enabled() && !listen.tcp.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeTlsServerCredentials(tls);
    if (!creds.ok()) return creds.status();
    a.tcp_credentials = *std::move(creds);
    if (!tls.client_ca.empty()) {
      a.identifier = std::make_unique<CertificateIdentifier>(std::move(a.identifier));
    }
  }
  if (!access.tokens.empty()) {
    absl::StatusOr<std::unique_ptr<TokenIdentifier>> tokens =
        TokenIdentifier::Create(access, std::move(a.identifier));
    if (!tokens.ok()) return tokens.status();
    a.tokens = tokens->get();
    a.identifier = *std::move(tokens);
  }
  return a;
}

void LogTcpAccess(const ListenConfig& listen, const AccessConfig& access, int tcp_port) {
  const TlsConfig& tls = listen.tls;
  const size_t tokens = access.tokens.size();
  spdlog::info(
      "listening on TCP {} (port {}){}{}", listen.tcp, tcp_port,
      !tls.enabled()            ? ""
      : tls.require_client_cert ? ", TLS, client certificates required"
      : !tls.client_ca.empty()  ? ", TLS, client certificates verified when sent"
                                : ", TLS",
      tokens == 0 ? "" : absl::StrCat(", bearer tokens required (", tokens, " configured)"));
  if (tokens > 0) {
    spdlog::info("access: {} bearer token(s); unix socket clients {}", tokens,
                 access.require_token_on_unix ? "need one too" : "need none");
  }
  if (tls.enabled()) WarnIfCertificateNotValid(tls, "TLS at start");
  // Who may use the unix socket is checked against the kernel's credentials
  // of each connection; a TCP client has no such credentials. Without
  // tokens or required client certificates anyone on this host reaches the
  // same pipelines over loopback TCP.
  // The unix socket is always restricted: listen.unix_mode may not grant
  // access to others (a config check).
  const bool unix_restricted = !listen.unix_path.empty();
  const bool uids_listed = !listen.allowed_uids.empty() || !listen.allowed_gids.empty();
  if (unix_restricted && tokens == 0 && !tls.require_client_cert) {
    if (uids_listed) {
      // The TCP listener looks up the uid owning a local connection's other
      // end and applies the same lists (server/access/tcp_listener.h).
      spdlog::info(
          "TCP {}: connections from this host are held to listen.allowed_uids / allowed_gids as "
          "on the unix socket (by the uid owning their socket); TCP asks for no token",
          listen.tcp);
    } else {
      spdlog::warn(
          "the unix socket admits only some users (listen.unix_mode {:o}), but TCP {} asks for "
          "no bearer token (access.tokens) nor client certificate "
          "(listen.tls.require_client_cert): any local user reaches the same pipelines over "
          "TCP, whatever listen.unix_mode says (set access.tokens, or listen.allowed_uids / "
          "allowed_gids, which local TCP connections are held to as well)",
          listen.unix_mode, listen.tcp);
    }
  }
  if (!IsLoopbackAddress(listen.tcp) && !tls.enabled() && tokens == 0) {
    spdlog::warn(
        "TCP {} is not a loopback address and has neither TLS nor bearer tokens "
        "(listen.allow_insecure_tcp): anyone who reaches the port can list the pipelines, read "
        "every dataset and hold every stream slot",
        listen.tcp);
  }
}

}  // namespace conveyor::server
