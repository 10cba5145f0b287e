// TLS of the data socket (listen.tls): OpenSSL server contexts built from
// the same certificate, key and client-CA files as the gRPC listener's
// credentials (TLS 1.2 or later, no session tickets; with client_ca, client certificates are
// verified, and required with require_client_cert), RAII handles for
// SSL_CTX and SSL, and ReloadingTlsContext, which rebuilds its context when
// the certificate, key or client-CA file changes (mtime or size), looked at no more
// often than listen.tls.reload_interval_seconds. A reload that fails keeps
// the previous context and is logged once (until one succeeds again).
//
// Thread-safety: the free functions have no shared state. ReloadingTlsContext
// is safe to call from any thread (its state is under a mutex); the SSL
// objects it makes belong to the caller.
#pragma once

#include <openssl/ssl.h>
#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "server/access/tls_config.h"

namespace conveyor::server {

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

// OpenSSL's error queue as text ("" when empty); clears it.
std::string TakeOpenSslErrors();

// A server context of `tls`'s files. InvalidArgument naming the field.
absl::StatusOr<SslCtxPtr> MakeServerSslContext(const TlsConfig& tls);

class ReloadingTlsContext {
 public:
  using Clock = std::chrono::steady_clock;

  // Builds the first context (errors as MakeServerSslContext).
  static absl::StatusOr<std::unique_ptr<ReloadingTlsContext>> Create(const TlsConfig& tls);

  // A new server-side session on the current context (reloaded first when
  // the interval has passed and the files changed), for `fd` (non-blocking).
  // nullptr (logged) only if OpenSSL cannot allocate one.
  SslPtr NewSession(int fd);

  // Reloads now when the files changed, whatever the interval (tests).
  void CheckNow();

 private:
  struct FileStamp {
    timespec mtime{};
    off_t size = -1;
    bool operator==(const FileStamp& o) const {
      return mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec && size == o.size;
    }
  };
  struct Stamps {
    FileStamp cert, key, client_ca;
    bool operator==(const Stamps& o) const {
      return cert == o.cert && key == o.key && client_ca == o.client_ca;
    }
  };
  static Stamps StampsOf(const TlsConfig& tls);

  explicit ReloadingTlsContext(TlsConfig tls) : tls_(std::move(tls)) {}
  void ReloadIfChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const TlsConfig tls_;
  Mutex mu_;
  SslCtxPtr ctx_ ABSL_GUARDED_BY(mu_);
  Stamps stamps_ ABSL_GUARDED_BY(mu_);
  Clock::time_point next_check_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;  // the last reload failed (logged)
};

}  // namespace conveyor::server
