// ConveyorService: the daemon's service logic with no transport in it — it
// owns the engine and the pipelines (a set a config reload may replace:
// each stream keeps the definition it opened with; server/service/pipeline_registry.h),
// validates stream requests (planning each stream once with PlanStream,
// core/engine/stream_plan.h, whose figures the budget, StreamOpened and the
// engine all use), accounts the slot-memory budget, the stream limit and each client's share of
// them (server/service/client_limits.h), keeps the registry of open streams (for stats, the fd
// hand-over's owner check and shutdown), and — with a watchdog thread when stream_idle_timeout is
// set — ends streams whose client holds slots and moves nothing. How each stream's batches reach
// its client is its transport's business (server/transport/transport.h): the service asks the
// daemon's TransportSet for one per stream and keeps it in the Session. The gRPC adapter
// (server/service/grpc_service.h) forwards to it and converts its absl::Status to a gRPC status
// once; tests can drive it without a network.
//
// Requests and replies are the proto messages of conveyor/v1 (plain data);
// no gRPC type appears here.
//
// Thread-safety: all methods are safe to call concurrently. A Session is
// owned by one caller (the stream's reactor) and must be destroyed before
// the service.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/base/mutex.h"
#include "core/engine/engine.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/stream.h"
#include "core/engine/stream_plan.h"
#include "server/access/identity.h"
#include "server/service/client_limits.h"
#include "server/service/delivery_counters.h"
#include "server/service/pipeline_registry.h"
#include "server/service/reload_counters.h"
#include "server/transport/transport.h"

namespace conveyor::server {

// The most batches a client may hold unreleased (OpenStream.credits).
inline constexpr uint32_t kMaxCredits = 64;

struct ServiceOptions {
  uint64_t memory_budget = 1ull << 30;  // bytes of slots over all open streams
  uint32_t max_streams = 64;
  // How long a call whose stream has ended waits for its client to fetch
  // what it still needs (StreamTransport::MustWaitForClient) before it is
  // finished anyway.
  std::chrono::milliseconds handover_grace{10'000};
  // A stream whose client holds slots while nothing moves — no batch
  // emitted, no slot released — for this long is ended with
  // DEADLINE_EXCEEDED, its slots and budget given back (a client that
  // stopped reading or releasing must not keep its share of the daemon
  // forever); zero: never. A watchdog thread looks every timeout/4 (10 ms
  // to 1 s).
  std::chrono::milliseconds stream_idle_timeout{0};
  // What one client (ClientIdentity::LimitKey) may hold.
  ClientLimits per_client;
};

class ConveyorService;

// One open stream: the core stream plus what the service reserved for it
// (budget, stream count, registry entry). Destroying it cancels the core
// stream and gives everything back.
//
// Thread-safety: const methods and stream() are safe from any thread while
// the session lives; destruction must not race with other calls.
class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  uint64_t id() const { return stream_->id(); }
  Stream& stream() const { return *stream_; }
  // How the stream's batches reach the client.
  StreamTransport& transport() const { return *transport_; }
  v1::Transport transport_kind() const { return opened_.transport(); }
  // The first reply of the stream.
  const v1::StreamOpened& opened() const { return opened_; }
  const ClientIdentity& client() const { return client_; }
  // Counts a batch of `images` samples (`bytes` of images) handed to the
  // client, in the daemon's delivery counters (GetStats.deliveries).
  void CountDelivered(uint64_t images, uint64_t bytes) const {
    if (delivered_ != nullptr) delivered_->Add(images, bytes);
  }
  // Counts how long the client waited for a batch (GetStats.data_wait of
  // the stream's pipeline).
  void CountDataWait(uint64_t wait_ns) const {
    if (data_wait_ != nullptr) data_wait_->Add(wait_ns);
  }

 private:
  friend class ConveyorService;
  Session(ConveyorService* service, std::shared_ptr<Stream> stream, ClientIdentity client,
          uint64_t reserved_bytes, uint32_t reserved_credits)
      : service_(service),
        stream_(std::move(stream)),
        client_(std::move(client)),
        reserved_bytes_(reserved_bytes),
        reserved_credits_(reserved_credits) {}

  ConveyorService* const service_;  // not owned; outlives the session
  const std::shared_ptr<Stream> stream_;
  const ClientIdentity client_;
  const uint64_t reserved_bytes_;
  const uint32_t reserved_credits_;
  // Both set before the session is handed out.
  std::unique_ptr<StreamTransport> transport_;
  v1::StreamOpened opened_;
  DeliveryCounters::Cell* delivered_ = nullptr;      // the service's; outlives the session
  DeliveryCounters::WaitCell* data_wait_ = nullptr;  // the service's too
};

class ConveyorService {
 public:
  // REQUIRES: `engine` and `transports` non-null; `pipelines` validated,
  // names unique.
  static absl::StatusOr<std::unique_ptr<ConveyorService>> Create(
      const ServiceOptions& options, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
      std::unique_ptr<Engine> engine, std::unique_ptr<TransportSet> transports);
  ~ConveyorService();  // shuts the engine down; REQUIRES: no live Session

  v1::ListPipelinesResponse ListPipelines() const;

  // Serves `pipelines` to streams opened from now on (a config reload);
  // open streams keep the definition they opened with. InvalidArgument
  // (and nothing replaced) unless they pass PipelineRegistry::Validate.
  absl::Status ReplacePipelines(PipelineList pipelines);
  // The pipelines served now.
  PipelineList Pipelines() const { return pipelines_.List(); }
  // The daemon-wide counters (stages with failures by reason, deliveries
  // by pipeline and transport, budget) and, per open stream, its stats — of every
  // stream for an operator, of `viewer`'s own streams (its LimitKey) for
  // anyone else (ClientIdentity::SeesStreamsOf). The overload without a
  // viewer is the operator's view, for the daemon itself and tests.
  v1::GetStatsResponse GetStats(const ClientIdentity& viewer) const;
  v1::GetStatsResponse GetStats() const;

  // OK when `peer` (a unix connection's credentials) may receive the
  // memory of stream `stream_id`: the stream is open and was opened by a
  // unix client of the same uid. PERMISSION_DENIED otherwise (NOT_FOUND
  // for a stream that is not open).
  absl::Status CheckStreamOwner(uint64_t stream_id, const PeerCredentials& peer) const;

  // Validates `request` and opens its stream for `client` (the transports
  // decide what they can serve it; it must be allowed the pipeline).
  // `wake`, if set, is called (from any thread, no service lock held) when
  // the stream's transport may no longer need the call to wait
  // (StreamTransport::MustWaitForClient) and when the service begins
  // shutting down: the stream's owner may be waiting for either. Errors, by code:
  // UNAVAILABLE (shutting down), NOT_FOUND (pipeline), PERMISSION_DENIED
  // (a pipeline `client` may not open), INVALID_ARGUMENT
  // (batch_size, credits, rank, transport), FAILED_PRECONDITION (shared
  // memory over TCP, resume at another world size), OUT_OF_RANGE (resume
  // point), RESOURCE_EXHAUSTED (budget, stream limit or the client's
  // per-client share, with the figures).
  //
  // `abort`, if set, is called (from the idle watchdog's thread, no service
  // lock held) when the service ended the stream for idleness and its call
  // still has not finished handover_grace later — its client is not
  // reading, so the call's last write never completes: the owner must end
  // the RPC at once.
  absl::StatusOr<std::unique_ptr<Session>> OpenStream(const v1::OpenStream& request,
                                                      const ClientIdentity& client,
                                                      std::function<void()> wake = nullptr,
                                                      std::function<void()> abort = nullptr);

  // Stops accepting streams (OpenStream → UNAVAILABLE "daemon shutting
  // down") and cancels every open stream with that status. Idempotent.
  void BeginShutdown();
  bool shutting_down() const;

  // Counts a StreamBatches call refused with `code` before its stream
  // opened (GetStats.streams_refused_by_code). REQUIRES: code is not OK.
  void CountRefusedStream(absl::StatusCode code) { refusals_.Add(code); }

  const ServiceOptions& options() const { return options_; }

  // How the daemon's config reloads went (GetStats.config_reloads_*); the
  // reloader records each outcome here.
  ReloadCounters& reloads() const { return *reloads_; }

 private:
  friend class Session;
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::weak_ptr<Stream> stream;
    ClientIdentity client;  // who opened it
    std::function<void()> wake;
    std::function<void()> abort;
    // The idle watchdog's: the figures it last saw and since when.
    uint64_t seen_batches = 0;
    uint64_t seen_held = 0;
    Clock::time_point progress_at = Clock::now();
    std::optional<Clock::time_point> idle_ended_at;  // cancelled for idleness
    bool aborted = false;
  };

  ConveyorService(const ServiceOptions& options,
                  std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
                  std::unique_ptr<Engine> engine, std::unique_ptr<TransportSet> transports);

  // Checks the request, chooses its transport and plans the stream
  // (core/engine/stream_plan.h: validation, resume, geometry; no lock).
  absl::StatusOr<StreamPlan> PlanRequest(const v1::OpenStream& request,
                                         const ClientIdentity& client,
                                         const PipelineConfig& pipeline,
                                         Transport** transport) const;
  void Unregister(uint64_t stream_id, const std::string& client_key, uint32_t credits,
                  uint64_t reserved_bytes);
  // The idle watchdog's thread (options_.stream_idle_timeout > 0).
  void WatchIdleStreams();
  void StopWatchdog();

  // Constant after construction.
  const ServiceOptions options_;
  const std::unique_ptr<Engine> engine_;
  const std::unique_ptr<TransportSet> transports_;
  const std::unique_ptr<DeliveryCounters> deliveries_;  // thread-safe itself
  StreamRefusals refusals_;                             // thread-safe itself
  const std::unique_ptr<ReloadCounters> reloads_ = std::make_unique<ReloadCounters>();  // same

  PipelineRegistry pipelines_;  // thread-safe itself

  mutable Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t reserved_streams_ ABSL_GUARDED_BY(mu_) = 0;  // counted from reservation on
  std::map<uint64_t, Entry> sessions_ ABSL_GUARDED_BY(mu_);
  ClientUsage per_client_ ABSL_GUARDED_BY(mu_);  // reserved with the budget
  bool stop_watchdog_ ABSL_GUARDED_BY(mu_) = false;
  CondVar watchdog_cv_;
  std::thread watchdog_;
};

}  // namespace conveyor::server
