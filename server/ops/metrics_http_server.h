// MetricsHttpServer: the daemon's Prometheus endpoint, an HTTP listener
// (civetweb, from Debian's libcivetweb-dev) that answers GET (or HEAD)
//   /metrics  what its render function returns (server/ops/metrics_exposition.h)
//   /healthz  200 "ok": the process is alive and answers (a liveness probe)
//   /readyz   200 "ready" while its readiness function says so, else 503
//             "not ready: REASON" (a readiness probe: starting, draining)
// and nothing else: no files are served, other paths get 404 and other
// methods 405. Off unless the config asks for it (metrics.listen).
//
// It owns the civetweb context: Start binds and starts civetweb's threads
// (a small fixed number; a slow client times out after a few seconds), the
// destructor stops them and closes the socket. Failing to bind is an error
// naming the address, never a crash.
//
// Thread-safety: `render` is called from civetweb's threads, possibly
// several at once, until the server is destroyed: it must be thread-safe
// and outlive the server. port() may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

struct mg_connection;
struct mg_context;

namespace conveyor::server {

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;
  // "" when ready, else why not (a short text for /readyz's 503).
  using Readiness = std::function<std::string()>;

  // Listens on `address` — "IPV4:PORT" or "[IPV6]:PORT"; port 0 picks a
  // free one (see port()) — and serves `render`'s text at /metrics and
  // `ready`'s answer at /readyz (null: always ready). Unavailable naming
  // `address` and civetweb's reason when it cannot. `ready` runs on
  // civetweb's threads like `render` (same rules).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  Render render,
                                                                  Readiness ready = nullptr);
  ~MetricsHttpServer();  // stops civetweb's threads; no render runs after it
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }  // the bound port

 private:
  MetricsHttpServer(Render render, Readiness ready)
      : render_(std::move(render)), ready_(std::move(ready)) {}
  static int HandleMetrics(mg_connection* conn, void* self);
  static int HandleHealth(mg_connection* conn, void* self);
  static int HandleReady(mg_connection* conn, void* self);

  const Render render_;
  const Readiness ready_;          // may be null
  mg_context* context_ = nullptr;  // owned: mg_stop in the destructor
  int port_ = 0;
};

}  // namespace conveyor::server
