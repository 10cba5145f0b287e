#include "server/access/tls_context.h"

#include <openssl/err.h>
#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/access/tls_credentials.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

std::string TakeOpenSslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

namespace {

absl::Status Bad(const char* field, const std::string& path, const char* what) {
  return absl::InvalidArgumentError(
      absl::StrCat("field ", field, ": '", path, "': ", what, " (", TakeOpenSslErrors(), ")"));
}

}  // namespace

absl::StatusOr<SslCtxPtr> MakeServerSslContext(const TlsConfig& tls) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (ctx == nullptr) {
    return absl::InternalError(absl::StrCat("SSL_CTX_new: ", TakeOpenSslErrors()));
  }
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // No resumption: every data connection is a fresh handshake, and nothing
  // but the batches is written after it.
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  // SSL_write may write part of a batch and is retried from where it
  // stopped (the slot does not move, but the pointer advances).
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1) {
    return Bad("listen.tls.cert", tls.cert, "not a usable PEM certificate chain");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return Bad("listen.tls.key", tls.key, "not a usable PEM private key");
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return Bad("listen.tls.key", tls.key, "is not the key of listen.tls.cert");
  }
  if (!tls.client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), tls.client_ca.c_str(), nullptr) != 1) {
      return Bad("listen.tls.client_ca", tls.client_ca, "holds no usable PEM certificate");
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx.get(), names);  // takes ownership
    SSL_CTX_set_verify(
        ctx.get(),
        SSL_VERIFY_PEER | (tls.require_client_cert ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  }
  ERR_clear_error();
  return ctx;
}

ReloadingTlsContext::Stamps ReloadingTlsContext::StampsOf(const TlsConfig& tls) {
  auto stamp = [](const std::string& path) {
    FileStamp s;
    struct stat st {};
    if (!path.empty() && ::stat(path.c_str(), &st) == 0) {
      s.mtime = st.st_mtim;
      s.size = st.st_size;
    }
    return s;
  };
  return Stamps{stamp(tls.cert), stamp(tls.key), stamp(tls.client_ca)};
}

absl::StatusOr<std::unique_ptr<ReloadingTlsContext>> ReloadingTlsContext::Create(
    const TlsConfig& tls) {
  std::unique_ptr<ReloadingTlsContext> r(new ReloadingTlsContext(tls));
  const Stamps stamps = StampsOf(tls);
  absl::StatusOr<SslCtxPtr> ctx = MakeServerSslContext(tls);
  if (!ctx.ok()) return ctx.status();
  MutexLock lock(&r->mu_);
  r->ctx_ = *std::move(ctx);
  r->stamps_ = stamps;
  r->next_check_ = Clock::now() + std::chrono::seconds(tls.reload_interval_seconds);
  return r;
}

void ReloadingTlsContext::ReloadIfChanged() {
  next_check_ = Clock::now() + std::chrono::seconds(tls_.reload_interval_seconds);
  const Stamps now = StampsOf(tls_);
  if (now == stamps_) return;
  absl::StatusOr<SslCtxPtr> ctx = MakeServerSslContext(tls_);
  if (!ctx.ok()) {
    // Half-written files are common mid-renewal: keep serving with the old
    // context, and try again when the files change again.
    if (!failing_) {
      spdlog::warn(
          "data socket: the renewed TLS files cannot be used yet ({}); keeping the "
          "previous certificate",
          std::string(ctx.status().message()));
      failing_ = true;
    }
    stamps_ = now;
    return;
  }
  ctx_ = *std::move(ctx);
  stamps_ = now;
  failing_ = false;
  spdlog::info("data socket: TLS certificate reloaded from {}", tls_.cert);
  WarnIfCertificateNotValid(tls_, "data socket, TLS files reloaded");
}

void ReloadingTlsContext::CheckNow() {
  MutexLock lock(&mu_);
  ReloadIfChanged();
}

SslPtr ReloadingTlsContext::NewSession(int fd) {
  MutexLock lock(&mu_);
  if (Clock::now() >= next_check_) ReloadIfChanged();
  SslPtr ssl(SSL_new(ctx_.get()));
  if (ssl == nullptr || SSL_set_fd(ssl.get(), fd) != 1) {
    spdlog::error("data socket: cannot start a TLS session: {}", TakeOpenSslErrors());
    return nullptr;
  }
  SSL_set_accept_state(ssl.get());
  return ssl;
}

}  // namespace conveyor::server
