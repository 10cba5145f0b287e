#include "server/daemon.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_posix.h>
#include <unistd.h>

#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/posix_error.h"
#include "core/base/text_escape.h"
#include "core/decode/ffmpeg/log.h"
#include "core/engine/batch_layout.h"
#include "core/gpu/device_api.h"
#include "core/gpu/host_device_api.h"
#include "server/access/access.h"
#include "server/access/peer_credentials_identifier.h"
#include "server/access/tcp_listener.h"
#include "server/access/unix_access.h"
#include "server/access/unix_connections.h"
#include "server/access/unix_listener.h"
#include "server/access/unix_socket.h"
#include "server/check_config.h"
#include "server/config/loader.h"
#include "server/config/system_cpus.h"
#include "server/flags.h"
#include "server/notifier.h"
#include "server/ops/build_info.h"
#include "server/ops/grpc_logging.h"
#include "server/ops/logging.h"
#include "server/ops/metrics_exposition.h"
#include "server/ops/metrics_http_server.h"
#include "server/ops/process_metrics.h"
#include "server/prepare.h"
#include "server/probe.h"
#include "server/reloader.h"
#include "server/service/grpc_service.h"
#include "server/service/service.h"
#include "server/signals.h"
#include "server/transport/data_socket.h"
#include "server/transport/data_socket_server.h"
#include "server/transport/device/device_transport.h"
#include "server/transport/device/gpu_budget.h"
#include "server/transport/fd_server.h"
#include "server/transport/inline.h"
#include "server/transport/shm.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#ifndef CONVEYOR_VERSION
#define CONVEYOR_VERSION "dev"
#endif

namespace conveyor::server {

namespace fs = std::filesystem;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr char kServiceName[] = "conveyor.v1.Conveyor";
// Client messages are small: an OpenStream (a pipeline name and a few
// numbers) or a Release of at most 64 slots. Anything larger is refused by
// gRPC (RESOURCE_EXHAUSTED) before it reaches the service.
constexpr int kMaxReceiveMessageBytes = 64 << 10;
// What one call may have the daemon buffer from its client: the stream's
// HTTP/2 receive window, kept there (no window growth from bandwidth
// probing, which only ever concerns the client's tiny messages here).
constexpr int kReceiveWindowBytes = 64 << 10;
// gRPC's server handshake timeout (120 s by default): how long a TCP
// connection the daemon handed to gRPC may take to finish its TLS handshake
// and send its HTTP/2 SETTINGS. Its first message came already (the
// TcpListener waited for it), so a real client needs milliseconds.
constexpr int kServerHandshakeTimeoutMs = 10 * 1000;

// Raises the soft RLIMIT_NOFILE to the hard one, as a server that holds a
// shard open per fd and many connections should: a shell's default soft
// limit (1024) is far below what the kernel lets the process have. Returns
// the old and new soft limits (equal: nothing changed or it failed).
std::pair<rlim_t, rlim_t> RaiseFdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return {0, 0};
  const rlim_t old_soft = r.rlim_cur;
  if (r.rlim_cur >= r.rlim_max) return {old_soft, old_soft};
  r.rlim_cur = r.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &r) != 0) return {old_soft, old_soft};
  return {old_soft, r.rlim_cur};
}

// The soft RLIMIT_NOFILE (0: unknown or unlimited beyond int).
int FdLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur > INT_MAX) {
    return 0;
  }
  return static_cast<int>(r.rlim_cur);
}

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic: a reader never sees a half-written file
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

uint64_t MaxMessageBytes(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines) {
  uint64_t largest = 0;
  for (const auto& p : pipelines) {
    const BatchLayout l = BatchLayout::For(p->transform, p->max_batch_size, p->fields);
    // images + labels + indices + fields, plus per-sample failure text at most.
    largest = std::max<uint64_t>(largest, l.slot_bytes + uint64_t{p->max_batch_size} * 1024);
  }
  return std::clamp<uint64_t>(largest + (1u << 20), 4u << 20, INT_MAX);
}

// ---------------------------------------------------------------- Daemon

namespace {
// Says at start which GPUs DEVICE_MEMORY streams can use, or why none.
void LogDevices(gpu::DeviceApi& api, uint64_t gpu_memory_budget) {
  absl::StatusOr<std::vector<gpu::DeviceInfo>> devices = api.Devices();
  if (!devices.ok()) {
    spdlog::info("DEVICE_MEMORY streams: none on this host ({}): {}", api.name(),
                 std::string(devices.status().message()));
    return;
  }
  std::shared_ptr<GpuBudget> budget = GpuBudget::Create(gpu_memory_budget);
  for (const gpu::DeviceInfo& d : *devices) {
    spdlog::info("DEVICE_MEMORY streams on GPU {} ({}, {}, {}): gpu_memory_budget {}", d.ordinal,
                 d.uuid, d.name, FormatDeviceBytes(d.total_bytes),
                 FormatDeviceBytes(budget->LimitOf(d)));
  }
}
}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(
    const DaemonConfig& config, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
    const std::string& port_file, std::shared_ptr<gpu::DeviceApi> device_api) {
  if (device_api == nullptr) device_api = gpu::MakeDeviceApi();
  std::unique_ptr<Daemon> d(new Daemon(config));
  const std::string& unix_path = config.listen.unix_path;
  const std::string fd_path = unix_path.empty() ? "" : unix_path + ".fd";

  // Names in listen.allowed_* / operator_* resolve before anything binds.
  absl::StatusOr<UnixAccessPolicy> unix_access = ResolveUnixAccess(config.listen);
  if (!unix_access.ok()) return unix_access.status();
  // Who may call, built before anything listens: unix clients are known by
  // the credentials the unix listener records for their connection, TCP
  // clients by their address; then tokens and TLS certificates refine both.
  d->unix_connections_ = std::make_unique<UnixConnections>();
  absl::StatusOr<Access> access =
      BuildAccess(config.listen, config.access,
                  std::make_unique<PeerCredentialsIdentifier>(
                      d->unix_connections_.get(), unix_path, std::make_unique<ClientIdentifier>()));
  if (!access.ok()) return access.status();

  // threads: 0 means the CPUs this process may use, not the machine's.
  EngineOptions engine_options = config.engine;
  if (engine_options.num_threads == 0) {
    std::string source;
    engine_options.num_threads =
        UsableCpus(AffinityCpuCount(), CgroupCpuQuota(""),
                   static_cast<int>(std::thread::hardware_concurrency()), &source);
    spdlog::info("threads: 0 -> {} worker threads ({})", engine_options.num_threads, source);
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(engine_options);
  if (!engine.ok()) return engine.status();
  const int threads = (*engine)->num_threads();
  if (engine_options.cpu_budget > 0) {
    spdlog::info("engine.cpu_budget: {:.2f} CPUs -> {} worker threads, held to the budget",
                 engine_options.cpu_budget, threads);
  }

  if (const std::string data = DataSocketAddress(config.listen); !data.empty()) {
    absl::StatusOr<std::unique_ptr<DataSocketServer>> ds =
        DataSocketServer::Start(data, &config.listen.tls);
    if (!ds.ok()) return ds.status();
    d->data_server_ = *std::move(ds);
  }

  ServiceOptions so;
  so.memory_budget = config.memory_budget;
  so.max_streams = config.max_streams;
  so.per_client = config.per_client;
  so.stream_idle_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(config.stream_idle_timeout_seconds * 1000));
  const uint64_t max_message_bytes = MaxMessageBytes(pipelines);
  d->max_message_bytes_ = max_message_bytes;
  // The transports in AUTO's order of preference: shared memory on the
  // unix socket, the data socket over TCP, inline for everyone else; GPU
  // memory only when asked for (never AUTO's choice).
  auto shm = std::make_unique<ShmTransport>(fd_path);
  ShmTransport* const shm_transport = shm.get();  // owned by the service from here
  LogDevices(*device_api, config.gpu_memory_budget);
  auto device = std::make_unique<DeviceTransport>(
      device_api, GpuBudget::Create(config.gpu_memory_budget), fd_path);
  DeviceTransport* const device_transport = device.get();  // owned by the service too
  std::vector<std::unique_ptr<Transport>> transports;
  transports.push_back(std::move(shm));
  transports.push_back(std::make_unique<DataSocketTransport>(d->data_server_.get()));
  transports.push_back(std::make_unique<InlineTransport>(max_message_bytes));
  transports.push_back(std::move(device));
  absl::StatusOr<std::unique_ptr<ConveyorService>> service =
      ConveyorService::Create(so, std::move(pipelines), *std::move(engine),
                              std::make_unique<TransportSet>(std::move(transports)));
  if (!service.ok()) return service.status();
  d->service_ = *std::move(service);

  // The metrics endpoint before any client socket: a busy metrics port
  // refuses the start before clients could connect. /readyz says 503
  // until Start has finished (every listener up) and again from the
  // moment Shutdown begins.
  if (!config.metrics.listen.empty()) {
    ConveyorService* const service = d->service_.get();
    const std::atomic<const TcpListener*>* const tcp = &d->tcp_metrics_;
    const Daemon* const daemon = d.get();
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> metrics = MetricsHttpServer::Start(
        config.metrics.listen,
        [service, tcp] {
          std::string text = RenderPrometheusText(service->GetStats());
          text += RenderBuildInfo(BuildVersion(), BuildRevision());
          if (const TcpListener* l = tcp->load(std::memory_order_acquire)) {
            text += l->MetricsText();
          }
          text += RenderProcessMetrics(ReadProcessFigures());
          return text;
        },
        [daemon] { return daemon->NotReadyReason(); });
    if (!metrics.ok()) {
      return absl::Status(metrics.status().code(),
                          absl::StrCat("metrics.listen: ", metrics.status().message()));
    }
    d->metrics_server_ = *std::move(metrics);
    const std::string& m = config.metrics.listen;
    spdlog::info("Prometheus metrics on http://{}:{}/metrics", m.substr(0, m.rfind(':')),
                 d->metrics_server_->port());
  }

  if (!unix_path.empty()) {
    if (absl::Status st = PrepareUnixSocketPath(unix_path); !st.ok()) return st;
    if (absl::Status st = PrepareUnixSocketPath(fd_path); !st.ok()) return st;
    // A region goes only to the uid that opened its stream, whatever
    // stream id and secret the peer shows.
    ConveyorService* const service_ptr = d->service_.get();
    absl::StatusOr<std::unique_ptr<FdServer>> fds = FdServer::Start(
        fd_path, config.listen.unix_mode,
        [shm_transport, device_transport, service_ptr](
            uint64_t id, const Secret& secret, const UnixPeer& peer) -> absl::StatusOr<UniqueFd> {
          // The owner first: a successful hand-over wakes the stream's call,
          // which may then end and close its session at once.
          if (absl::Status st = service_ptr->CheckStreamOwner(id, peer.credentials); !st.ok()) {
            return st;
          }
          // A device stream's region is its ring of device memory.
          if (device_transport->Serves(id)) return device_transport->RegionFd(id, secret);
          return shm_transport->RegionFd(id, secret);
        });
    if (!fds.ok()) return fds.status();
    d->fd_server_ = *std::move(fds);
  }

  grpc::EnableDefaultHealthCheckService(true);
  // Server reflection: generic tools (grpcurl) list and call the service
  // without the .proto. It tells what the .proto in the repository tells.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  d->identifier_ = std::move(access->identifier);
  d->tokens_ = access->tokens;
  d->grpc_service_ = std::make_unique<GrpcConveyorService>(d->service_.get(), d->identifier_.get());
  grpc::ServerBuilder builder;
  // The unix socket is not gRPC's: the daemon's UnixListener accepts it,
  // checks each peer's credentials and hands allowed connections to the
  // server below (server/access/unix_listener.h says why).
  // TCP is not gRPC's listener either: the daemon's TcpListener accepts it,
  // bounds the connections that have not sent their first message yet and
  // keeps fds in reserve, and hands the others to gRPC through this
  // acceptor, which runs the TLS handshake of the TCP credentials.
  if (!config.listen.tcp.empty()) {
    d->tcp_acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
        grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
        access->tcp_credentials);
  }
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, kServerHandshakeTimeoutMs);
  builder.SetMaxSendMessageSize(static_cast<int>(max_message_bytes));
  builder.SetMaxReceiveMessageSize(kMaxReceiveMessageBytes);
  // gRPC checks the receive limit on a compressed message's compressed size
  // and inflates it whole: a 1 MB gzip request could make 1 GiB. Clients
  // send tiny messages, so the daemon accepts none compressed (identity
  // only; a compressed request fails UNIMPLEMENTED, as gRPC's protocol has
  // it) and keeps each call's receive window small.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kReceiveWindowBytes);
  // Notice peers that vanished without closing (TCP across hosts).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.RegisterService(d->grpc_service_.get());
  d->server_ = builder.BuildAndStart();
  if (d->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot start the gRPC server",
                     config.listen.tcp.empty() ? "" : " on TCP " + config.listen.tcp,
                     " (see gRPC's message above)"));
  }
  if (!unix_path.empty()) {
    grpc::Server* const server = d->server_.get();
    absl::StatusOr<std::unique_ptr<UnixListener>> listener = UnixListener::Start(
        unix_path, config.listen.unix_mode, *std::move(unix_access), d->unix_connections_.get(),
        [server](UniqueFd conn) { grpc::AddInsecureChannelFromFd(server, conn.Release()); });
    if (!listener.ok()) return listener.status();
    d->unix_listener_ = *std::move(listener);
  }
  if (!config.listen.tcp.empty()) {
    TcpListener::Options options;
    options.tls = config.listen.tls.enabled();
    if (const int limit = FdLimit(); limit > 0) {
      options.fd_high_water = FdHighWaterMark(limit, threads);
    }
    // Loopback TCP is no way around listen.allowed_uids / allowed_gids:
    // without tokens or required client certificates, a connection from a
    // local user they do not admit is closed before gRPC sees it.
    const bool uids_listed =
        !config.listen.allowed_uids.empty() || !config.listen.allowed_gids.empty();
    if (uids_listed && !unix_path.empty() && config.access.tokens.empty() &&
        !config.listen.tls.require_client_cert) {
      options.admits_local_uid = [policy = d->unix_listener_->policy()](uid_t uid) {
        return policy.Allows(PeerOfUid(uid));
      };
    }
    grpc::experimental::ExternalConnectionAcceptor* const acceptor = d->tcp_acceptor_.get();
    Daemon* const daemon = d.get();
    absl::StatusOr<std::unique_ptr<TcpListener>> tcp = TcpListener::Start(
        config.listen.tcp, options,
        [acceptor](UniqueFd conn, int listen_fd) {
          grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
          p.listener_fd = listen_fd;
          p.fd = conn.Release();  // gRPC's from here
          acceptor->HandleNewConnection(&p);
        },
        [daemon](bool short_of_fds) { daemon->OnFdPressure(short_of_fds); });
    if (!tcp.ok()) return tcp.status();
    d->tcp_listener_ = *std::move(tcp);
    d->tcp_metrics_.store(d->tcp_listener_.get(), std::memory_order_release);
    d->tcp_port_ = d->tcp_listener_->port();
    spdlog::info(
        "TCP {}: at most {} connections per peer and {} in all may wait for their first "
        "message ({} s each); none is accepted past {} open fds (RLIMIT_NOFILE {})",
        config.listen.tcp, options.max_pending_per_peer, options.max_pending,
        std::chrono::duration_cast<std::chrono::seconds>(options.pending_timeout).count(),
        options.fd_high_water, FdLimit());
  }

  grpc::HealthCheckServiceInterface* health = d->server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus("", true);
    health->SetServingStatus(kServiceName, true);
  }
  spdlog::info(
      "conveyord {} serving {} pipeline(s) with {} worker threads, slot memory budget "
      "{:.1f} MiB, max {} streams, max message {:.1f} MiB",
      CONVEYOR_VERSION, d->service_->ListPipelines().pipelines_size(), threads,
      config.memory_budget / 1048576.0, config.max_streams, max_message_bytes / 1048576.0);
  // Output caches are bounded apart from memory_budget (the slots'): said
  // once, so the whole worst case (config/README.md) can be added up.
  for (const PipelineSpec& p : config.pipelines) {
    if (!p.config.cache_output) continue;
    spdlog::info(
        "pipeline {}: output cache (cache_output) of up to {:.1f} MiB, beside the slot "
        "memory budget",
        EscapeText(p.config.name), p.config.cache_output_bytes / 1048576.0);
  }
  if (!unix_path.empty()) {
    spdlog::info("listening on unix:{} (mode {:o}; allowed: {}), fd hand-over on {}", unix_path,
                 config.listen.unix_mode, d->unix_listener_->policy().Describe(), fd_path);
  }
  if (d->tcp_port_ != 0) LogTcpAccess(config.listen, config.access, d->tcp_port_);
  if (d->data_server_ != nullptr) {
    spdlog::info("data socket for TCP clients on {} (port {}{})", DataSocketAddress(config.listen),
                 d->data_server_->port(), config.listen.tls.enabled() ? ", TLS" : "");
  }
  if (!port_file.empty()) {
    if (absl::Status st = WritePortFile(port_file, d->tcp_port_); !st.ok()) return st;
    d->port_file_ = port_file;
  }
  d->serving_.store(true, std::memory_order_release);
  return d;
}

std::string Daemon::NotReadyReason() const {
  if (draining_.load(std::memory_order_acquire)) return "shutting down (draining streams)";
  if (!serving_.load(std::memory_order_acquire)) return "starting";
  if (short_of_fds_.load(std::memory_order_acquire)) {
    return "short of file descriptors: new TCP connections are refused";
  }
  return "";
}

Daemon::Daemon(const DaemonConfig& config) : config_(config) {}

void Daemon::OnFdPressure(bool short_of_fds) {
  // Under the lock: a Shutdown that began is never undone by a late call.
  MutexLock lock(&mu_);
  if (shut_down_ || server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  short_of_fds_.store(short_of_fds, std::memory_order_release);
  if (short_of_fds) {
    spdlog::warn("health: NOT_SERVING while new TCP connections are refused for want of fds");
  } else {
    spdlog::info("health: SERVING again, the TCP listener has fds to accept with");
  }
  health->SetServingStatus(!short_of_fds);
}

int Daemon::data_port() const { return data_server_ != nullptr ? data_server_->port() : 0; }

Daemon::~Daemon() { Shutdown(); }

void Daemon::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  draining_.store(true, std::memory_order_release);
  const auto start = std::chrono::steady_clock::now();
  const bool serving = server_ != nullptr;
  if (server_ != nullptr) {
    if (auto* health = server_->GetHealthCheckService()) health->SetServingStatus(false);
  }
  if (service_ != nullptr) service_->BeginShutdown();
  // No new unix or TCP connections (and none handed to a server shutting down).
  if (unix_listener_ != nullptr) unix_listener_->Stop();
  if (tcp_listener_ != nullptr) tcp_listener_->Stop();
  if (server_ != nullptr) {
    const auto grace = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(config_.shutdown_timeout_seconds));
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    server_.reset();  // every reactor is done by now
  }
  grpc_service_.reset();
  if (fd_server_ != nullptr) fd_server_->Stop();
  fd_server_.reset();
  // The listener removed the socket file it bound (a daemon that failed
  // to start because another one serves the path never bound it).
  unix_listener_.reset();
  // The port is no longer served: a stale file would send clients (and
  // launchers waiting for it) to a port someone else may own next.
  if (!port_file_.empty()) {
    std::error_code ec;
    if (!fs::remove(port_file_, ec) && ec)
      spdlog::warn("cannot remove the port file {}: {}", port_file_, ec.message());
  }
  metrics_server_.reset();  // no scrape reads the service (or the TCP counters) any more
  tcp_metrics_.store(nullptr, std::memory_order_release);
  tcp_listener_.reset();
  tcp_acceptor_.reset();
  service_.reset();      // joins the engine's workers
  data_server_.reset();  // drops what ended streams had not flushed yet
  if (serving)
    spdlog::info("shut down in {:.0f} ms",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
}

// ---------------------------------------------------------------- main

int DaemonMain(int argc, char** argv) {
  BlockSignals();  // before any thread exists (server/signals.h)

  // Every message below may quote paths from the config or the dataset:
  // escaped, so that none can forge a line of its own.
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::cerr << "conveyord: " << EscapeText(flags.status().message()) << "\n";
    return kExitUsage;
  }
  if (flags->help) {
    std::cout << UsageText();
    return kExitOk;
  }
  if (flags->version) {
    std::cout << "conveyord " << CONVEYOR_VERSION << "\n";
    return kExitOk;
  }
  if (!flags->probe.empty()) {
    absl::Status st = Probe(flags->probe);
    std::cout << EscapeText(st.ok() ? flags->probe + ": SERVING" : std::string(st.message()))
              << "\n";
    return st.ok() ? kExitOk : kExitFailure;
  }
  absl::StatusOr<DaemonConfig> config = LoadConfigFile(flags->config, ProbeSystemInfo());
  if (config.ok()) {
    if (absl::Status st = ApplyFlags(*flags, &*config); !st.ok()) config = st;
  }
  if (!config.ok()) {
    std::cerr << "conveyord: " << EscapeText(config.status().message()) << "\n";
    return kExitUsage;
  }
  // The file alone: nothing it names is opened (server/check_config.h).
  if (flags->check_config && flags->no_data) {
    std::cout << SchemaOnlyCheckReport(flags->config, *config);
    return kExitOk;
  }
  SetUpLogging(config->log_level, config->log_format);
  // gRPC's and protobuf's own lines through the same log, before any gRPC
  // object exists (server/ops/grpc_logging.h).
  RouteGrpcLogs(config->log_format, config->log_level);
  RouteFfmpegLogs();  // FFmpeg's own lines: escaped, at debug level
  // Before the datasets load: each local shard holds an fd.
  if (const auto [was, now] = RaiseFdLimit(); was != now) {
    spdlog::info("open files limit raised from {} to {} (the hard limit)", was, now);
  }
  absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> pipelines =
      LoadPipelines(*config);
  if (!pipelines.ok()) {
    std::cerr << "conveyord: " << EscapeText(pipelines.status().message()) << "\n";
    return kExitUsage;
  }
  // The token and TLS files, like the datasets: a bad one is a config error
  // (and --check-config finds it).
  if (absl::Status st = CheckAccessFiles(config->listen, config->access); !st.ok()) {
    std::cerr << "conveyord: " << EscapeText(config->source) << ": " << EscapeText(st.message())
              << "\n";
    return kExitUsage;
  }
  if (!flags->prepare.empty()) return RunPrepare(*config, *pipelines, flags->prepare);
  if (flags->check_config) {
    std::set<const DatasetIndex*> datasets;
    std::vector<std::string> names;
    for (const auto& p : *pipelines) {
      datasets.insert(p->dataset.get());
      names.push_back(absl::StrCat(p->name, " (", p->dataset->size(), " samples)"));
    }
    std::cout << flags->config << ": OK: " << pipelines->size() << " pipeline(s) on "
              << datasets.size() << " dataset(s): " << absl::StrJoin(names, ", ") << "\n";
    return kExitOk;
  }

  // Once a stop signal came, shutdown gets shutdown_timeout_seconds (gRPC's
  // drain) plus this grace before the process exits anyway.
  constexpr double kStuckShutdownGraceSeconds = 10;
  SignalWaiter signals(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(
          config->shutdown_timeout_seconds + kStuckShutdownGraceSeconds)));

  // The device API behind DEVICE_MEMORY streams: CUDA, or the host model
  // (a test aid, --device-api host-model).
  std::shared_ptr<gpu::DeviceApi> device_api;
  if (flags->device_api == "host-model") {
    spdlog::warn(
        "--device-api host-model: DEVICE_MEMORY streams use a host model of {} GPU(s), "
        "not a GPU (a test aid)",
        flags->host_model_gpus.size());
    device_api = std::make_shared<gpu::HostDeviceApi>(flags->host_model_gpus);
  }
  absl::StatusOr<std::unique_ptr<Daemon>> daemon =
      Daemon::Start(*config, *std::move(pipelines), flags->port_file, std::move(device_api));
  if (!daemon.ok()) {
    spdlog::error("cannot start: {}: {}", absl::StatusCodeToString(daemon.status().code()),
                  EscapeText(daemon.status().message()));
    return kExitFailure;
  }
  // Serving: tell systemd (Type=notify), then wait for signals.
  Daemon* const running = daemon->get();
  ServiceNotifier notifier([running] { return FiguresOf(running->service()); },
                           ServiceNotifier::DefaultOptions());
  notifier.Ready();
  ConfigReloader reloader(*flags, *config, running->max_message_bytes(), &running->service(),
                          running->tokens());
  while (signals.Wait() == SignalWaiter::Request::kReload) {
    notifier.Reloading();
    (void)reloader.Reload();  // logs its outcome; a refused reload changes nothing
    notifier.Reloaded(reloader.summary());
  }
  notifier.Stopping();
  (*daemon)->Shutdown();
  daemon->reset();
  return kExitOk;
}

}  // namespace conveyor::server
