// ConveyorService: the daemon's service logic with no transport in it — it
// owns the engine and the pipelines, validates stream requests, accounts the
// slot-memory budget and the stream limit, and keeps the session registry
// (stream id → secret and region fd) that the fd hand-over socket consults.
// The gRPC adapter (server/grpc_service.h) forwards to it and converts its
// absl::Status to a gRPC status once; tests can drive it without a network.
//
// Requests and replies are the proto messages of conveyor/v1 (plain data);
// no gRPC type appears here.
//
// Thread-safety: all methods are safe to call concurrently. A Session is
// owned by one caller (the stream's reactor) and must be destroyed before
// the service.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/engine.h"
#include "core/pipeline_config.h"
#include "core/stream.h"
#include "core/unique_fd.h"
#include "server/data_socket_server.h"
#include "server/secret.h"

namespace conveyor::server {

// The most batches a client may hold unreleased (OpenStream.credits).
inline constexpr uint32_t kMaxCredits = 64;

// gRPC peers look like "unix:/path", "ipv4:1.2.3.4:5", "ipv6:[::1]:5".
bool IsUnixPeer(const std::string& peer);

struct ServiceOptions {
  uint64_t memory_budget = 1ull << 30;  // bytes of slots over all open streams
  uint32_t max_streams = 64;
  // The fd hand-over socket clients of SHARED_MEMORY streams connect to;
  // "" when the daemon has no unix socket (then no stream can share memory).
  std::string fd_socket_path;
  // The largest message the server may send: INLINE streams whose batch
  // would not fit are refused.
  uint64_t max_message_bytes = 64ull << 20;
  // The batch-data socket of DATA_SOCKET streams (not owned; outlives the
  // service), or null: TCP clients then get INLINE batches.
  DataSocketServer* data_server = nullptr;
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
  // Owns the stream's slot memory: what keeps it mapped while bytes of it
  // are still being written to a data socket.
  std::shared_ptr<const void> stream_keep_alive() const { return stream_; }
  // DATA_SOCKET streams: where the image bytes of each batch go; else null.
  DataSocketServer::Channel* data_channel() const { return data_channel_.get(); }
  v1::Transport transport() const { return transport_; }
  // The first reply of the stream.
  const v1::StreamOpened& opened() const { return opened_; }
  const std::string& peer() const { return peer_; }
  // SHARED_MEMORY: whether the client has fetched the region's memfd.
  bool region_handed_over() const { return handed_over_->load(std::memory_order_acquire); }

 private:
  friend class ConveyorService;
  Session(ConveyorService* service, std::shared_ptr<Stream> stream, v1::Transport transport,
          std::string peer, uint64_t reserved_bytes, std::shared_ptr<std::atomic<bool>> handed_over)
      : service_(service),
        stream_(std::move(stream)),
        transport_(transport),
        peer_(std::move(peer)),
        reserved_bytes_(reserved_bytes),
        handed_over_(std::move(handed_over)) {}

  ConveyorService* const service_;  // not owned; outlives the session
  const std::shared_ptr<Stream> stream_;
  const v1::Transport transport_;
  const std::string peer_;
  const uint64_t reserved_bytes_;
  const std::shared_ptr<std::atomic<bool>> handed_over_;  // shared with the registry
  v1::StreamOpened opened_;                               // set before the session is handed out
  std::unique_ptr<DataSocketServer::Channel> data_channel_;  // set before it is handed out
};

class ConveyorService {
 public:
  // REQUIRES: `engine` non-null; `pipelines` validated, names unique.
  static absl::StatusOr<std::unique_ptr<ConveyorService>> Create(
      const ServiceOptions& options, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
      std::unique_ptr<Engine> engine);
  ~ConveyorService();  // shuts the engine down; REQUIRES: no live Session

  v1::ListPipelinesResponse ListPipelines() const;
  v1::GetStatsResponse GetStats() const;

  // Validates `request` and opens its stream for the client at `peer` (a
  // gRPC peer string; unix peers may share memory). `wake`, if set, is
  // called (from any thread, no service lock held) when the stream's region
  // has been handed over and when the service begins shutting down: the
  // stream's owner may be waiting for either. Errors, by code:
  // UNAVAILABLE (shutting down), NOT_FOUND (pipeline), INVALID_ARGUMENT
  // (batch_size, credits, rank, transport), FAILED_PRECONDITION (shared
  // memory over TCP, resume at another world size), OUT_OF_RANGE (resume
  // point), RESOURCE_EXHAUSTED (budget or stream limit, with the figures).
  absl::StatusOr<std::unique_ptr<Session>> OpenStream(const v1::OpenStream& request,
                                                      const std::string& peer,
                                                      std::function<void()> wake = nullptr);

  // The fd hand-over: a duplicate of stream `stream_id`'s region memfd when
  // `secret` is its secret (compared in constant time). PermissionDenied
  // otherwise, without saying whether the stream exists.
  absl::StatusOr<UniqueFd> RegionFd(uint64_t stream_id, const Secret& secret);

  // Stops accepting streams (OpenStream → UNAVAILABLE "daemon shutting
  // down") and cancels every open stream with that status. Idempotent.
  void BeginShutdown();
  bool shutting_down() const;

  const ServiceOptions& options() const { return options_; }

 private:
  friend class Session;
  struct Entry {
    Secret secret{};
    UniqueFd region_fd;  // a duplicate, -1 for INLINE streams
    std::weak_ptr<Stream> stream;
    std::string peer;
    std::shared_ptr<std::atomic<bool>> handed_over;
    std::function<void()> wake;
  };

  ConveyorService(const ServiceOptions& options,
                  std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
                  std::unique_ptr<Engine> engine);

  // Checks the request and turns it into stream options (validation that
  // needs no lock).
  absl::Status BuildStreamOptions(const v1::OpenStream& request, const std::string& peer,
                                  const PipelineConfig& pipeline, StreamOptions* options,
                                  v1::Transport* transport) const;
  void Unregister(uint64_t stream_id, uint64_t reserved_bytes);
  v1::PipelineInfo Info(const PipelineConfig& p) const;

  // Constant after construction.
  const ServiceOptions options_;
  const std::vector<std::shared_ptr<const PipelineConfig>> pipelines_;
  const std::map<std::string, std::shared_ptr<const PipelineConfig>> by_name_;
  const std::unique_ptr<Engine> engine_;

  mutable absl::Mutex mu_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t reserved_streams_ ABSL_GUARDED_BY(mu_) = 0;  // counted from reservation on
  std::map<uint64_t, Entry> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
