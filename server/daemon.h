// The conveyord process: Daemon wires the parts together — engine, core
// service, fd hand-over socket, data socket, gRPC server with gRPC's
// default health service, metrics endpoint (with /healthz and /readyz for
// HTTP probes) — and takes them down in order:
//   1. health → NOT_SERVING; new StreamBatches calls → UNAVAILABLE
//   2. every open stream is cancelled (clients get UNAVAILABLE at once)
//   3. the unix and TCP listeners stop accepting; grpc::Server::Shutdown
//      with a deadline
//   (shutdown_timeout_seconds)
//   4. the fd socket stops, socket files are removed, the metrics endpoint
//      (if any) stops, the engine joins.
// gRPC server reflection is on (grpcurl lists and calls the service).
// DaemonMain is main(): flags (server/flags.h), the --probe health check
// (server/probe.h), config and datasets, then the daemon, run until a
// stop signal, with a reload of the config file at each SIGHUP
// (server/signals.h, server/reloader.h). Under systemd (Type=notify) it
// reports readiness, status, reloads, stopping and watchdog pings
// (server/notifier.h).
//
// Thread-safety: Daemon::Shutdown may be called from any thread, once or
// more; other methods are const after Start.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "server/config/config.h"

namespace grpc {
class Server;
namespace experimental {
class ExternalConnectionAcceptor;
}
}  // namespace grpc

namespace conveyor::gpu {
class DeviceApi;
}

namespace conveyor::server {

class ClientIdentifier;
class ConveyorService;
class DataSocketServer;
class FdServer;
class GrpcConveyorService;
class MetricsHttpServer;
class TcpListener;
class TokenIdentifier;
class UnixConnections;
class UnixListener;

class Daemon {
 public:
  // Starts serving `pipelines` (from LoadPipelines(config)). When
  // `port_file` is not empty, writes the bound TCP port there (and
  // Shutdown removes it). DEVICE_MEMORY streams use `device_api`; null:
  // gpu::MakeDeviceApi() (CUDA, or "none" in a build without it).
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(
      const DaemonConfig& config, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
      const std::string& port_file = "", std::shared_ptr<gpu::DeviceApi> device_api = nullptr);
  ~Daemon();  // Shutdown()
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // The shutdown sequence above. The first call does it (and returns when
  // done); later calls return at once.
  void Shutdown();

  int tcp_port() const { return tcp_port_; }  // 0 without TCP
  // The largest message the gRPC server sends (MaxMessageBytes of the
  // pipelines it started with); fixed for the daemon's life.
  uint64_t max_message_bytes() const { return max_message_bytes_; }
  int data_port() const;  // 0 without a data socket
  ConveyorService& service() const { return *service_; }
  // "" while the daemon serves; else why not, for the metrics endpoint's
  // /readyz: "starting" until Start has finished, "shutting down" from the
  // moment Shutdown begins, or short of fds (the TCP listener refuses
  // connections). Safe from any thread.
  std::string NotReadyReason() const;
  // The bearer-token link of the access chain, for a config reload to
  // replace its tokens; null without access.tokens.
  TokenIdentifier* tokens() const { return tokens_; }

 private:
  explicit Daemon(const DaemonConfig& config);
  // The TCP listener's fds ran short (true) or are back (false): health
  // NOT_SERVING while accepts fail for want of fds; nothing after Shutdown.
  void OnFdPressure(bool short_of_fds);

  const DaemonConfig config_;
  int tcp_port_ = 0;
  uint64_t max_message_bytes_ = 0;
  std::string port_file_;  // written by us (so we remove it)
  // Destroyed in reverse order: the server (and every reactor) before the
  // fd socket before the service (and engine) before the data socket.
  std::unique_ptr<DataSocketServer> data_server_;
  std::unique_ptr<ConveyorService> service_;
  // Renders service_'s stats on civetweb's threads: stopped before it goes.
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<FdServer> fd_server_;
  std::unique_ptr<UnixConnections> unix_connections_;
  std::unique_ptr<ClientIdentifier> identifier_;
  TokenIdentifier* tokens_ = nullptr;  // in identifier_'s chain (owned there)
  std::unique_ptr<GrpcConveyorService> grpc_service_;
  std::unique_ptr<grpc::Server> server_;
  // How TCP connections reach server_: the daemon's own listener accepts
  // them and hands those whose first message came to gRPC's acceptor
  // (server/access/tcp_listener.h says why). Stopped before the server
  // shuts down; destroyed after the metrics endpoint (which reads its
  // counters through tcp_metrics_).
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> tcp_acceptor_;
  std::unique_ptr<TcpListener> tcp_listener_;
  std::atomic<const TcpListener*> tcp_metrics_{nullptr};
  // Stopped before the server shuts down; hands connections to server_.
  std::unique_ptr<UnixListener> unix_listener_;

  // Read by /readyz on civetweb's threads.
  std::atomic<bool> serving_{false};       // Start has finished
  std::atomic<bool> draining_{false};      // Shutdown has begun
  std::atomic<bool> short_of_fds_{false};  // OnFdPressure's last word

  Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// The largest Batch message any of `pipelines` can produce (its slot at
// max_batch_size) plus room for the message's other fields, within gRPC's
// int limit (at least 4 MiB). Clients must accept messages this large
// (INLINE transport).
uint64_t MaxMessageBytes(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines);

// main(): returns the process exit code (0 ok, 1 failure at run time, 2 bad
// flags or config).
int DaemonMain(int argc, char** argv);

}  // namespace conveyor::server
