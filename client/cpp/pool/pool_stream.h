// PoolStream: one rank's batches drawn from several daemons at once — the
// node's own and any number of remote ones — in order and exactly once,
// with no dispatcher: the client pulls. The C++ face of the Python
// client's Loader(servers=[...]) (client/python/conveyor/_pool.py), with
// the same rules:
//
//   ASSIGN_OR_RETURN(auto pool, PoolStream::Open(
//       {"unix:///run/conveyor/conveyor.sock", "conveyor-pool.ml.svc:7070"}, stream_options));
//   while (true) {
//     ASSIGN_OR_RETURN(std::optional<BatchLease> batch, pool->Next());
//     if (!batch) break;
//     Train(batch->images(), batch->header().labels());
//   }
//
// - Ranges: the rank's stream is cut into ranges of range_batches batches
//   (pool_plan.h); each daemon has streams_per_daemon worker threads that
//   each take the lowest
//   range nobody holds — as a stream with max_batches and as many credits,
//   so the daemon never waits on the trainer inside it — and a daemon holds
//   at most ranges_ahead ranges whose batches Next() has not handed out.
//   Next() hands batches out in global order; the batches, their bytes and
//   their header fields (batch_in_epoch, position, offset, epoch_samples
//   counted over the epoch) are those of one daemon's stream of the same
//   request; sequence and slot are those of the range's stream.
// - Failures: a daemon whose stream fails, or that delivers nothing for
//   stall_timeout while Next() waits on it, gives the rest of its range to
//   the others from the first batch it did not deliver; its delivered
//   leases stay readable. It is tried again after a backoff (0.5 s
//   doubling to 10 s). Next() returns Unavailable only when no batch came
//   from any daemon for unavailable_timeout while it waited, naming each
//   daemon's state. A data error (DATA_LOSS: a sample fails under
//   fail_fast) is returned at its batch, in order, as one daemon would.
// - Refusals: each daemon's PipelineInfo is checked against the first
//   daemon's (FingerprintDifference); one that differs, or refuses the
//   request (NOT_FOUND, INVALID_ARGUMENT, PERMISSION_DENIED, ...), is not
//   used again; stats().refused names it and why.
// - Policies: kLocalFirst (the first entry takes ranges whenever it can,
//   the others only while Next() waited in the last 2 s or the first is
//   unusable) and kBalanced.
// - Names resolve to one daemon per address again every resolve_every.
// - TCP is plaintext in this client (see client.h); a token goes with
//   every call.
//
// Thread-safety: Next() from one thread; stats() and Close() from any.
// Leases follow stream.h's rules (any thread may release them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/pool/pool_servers.h"
#include "client/cpp/stream.h"

namespace conveyor::client {

enum class PoolPolicy { kLocalFirst, kBalanced };

struct PoolOptions {
  PoolPolicy policy = PoolPolicy::kLocalFirst;
  // 1 … 64: a range's batches (its stream's credits); 0: the most, up to
  // 16, that keeps ranges_ahead ranges of one daemon within buffer_bytes.
  uint32_t range_batches = 0;
  uint32_t ranges_ahead = 4;  // >= streams_per_daemon
  uint64_t buffer_bytes = uint64_t{512} << 20;
  // Ranges a daemon serves at once (a worker thread each): with 2 the next
  // range's stream fills while the current one's last batches are made.
  uint32_t streams_per_daemon = 2;
  absl::Duration stall_timeout = absl::Seconds(30);
  absl::Duration unavailable_timeout = absl::Seconds(60);
  absl::Duration resolve_every = absl::Seconds(5);
  PoolResolver resolver;  // how names resolve; empty: getaddrinfo
};

struct PoolDaemonStats {
  std::string address;
  std::string name;  // the DNS name it came from, if any
  bool local = false;
  std::string state;  // connecting, ready, backoff, refused, retired
  uint64_t ranges = 0, batches = 0, in_flight = 0;
  std::string last_error;
};

struct PoolStats {
  double starved_seconds = 0;  // how long Next() waited for batches
  uint64_t next_batch = 0;
  uint64_t requeued = 0;  // rests of ranges given to other daemons
  std::vector<PoolDaemonStats> daemons;
  std::map<std::string, std::string> refused;  // address -> why
};

namespace internal {
struct PoolState;  // pool_stream.cc
}  // namespace internal

class PoolStream {
 public:
  // `servers`: the local daemon first (pool_servers.h). `options`: the
  // stream as for one daemon (pipeline, batch_size, seed, first_epoch,
  // num_epochs, rank, world_size, shuffle, drop_last, transport, resume);
  // its credits, max_batches and canceller are the pool's own and
  // pin_memory / gpu_uuid are refused (InvalidArgument). Unavailable when
  // no daemon answers ListPipelines with the pipeline.
  static absl::StatusOr<std::unique_ptr<PoolStream>> Open(std::vector<std::string> servers,
                                                          const StreamOptions& options,
                                                          const PoolOptions& pool = {},
                                                          const ClientOptions& client = {});
  ~PoolStream();  // Close()
  PoolStream(const PoolStream&) = delete;
  PoolStream& operator=(const PoolStream&) = delete;

  // The next batch in order; nullopt after the last (never for an endless
  // stream). After an error the stream is closed and returns it again.
  absl::StatusOr<std::optional<BatchLease>> Next();
  // Stops every daemon's work and joins the workers; batches not handed out
  // are dropped. Idempotent.
  void Close();

  // The first daemon's PipelineInfo, which every daemon must match.
  const v1::PipelineInfo& pipeline() const;
  // Where to resume after the last batch handed out.
  const ResumeState& resume_state() const { return resume_; }
  std::optional<uint64_t> total_batches() const;
  PoolStats stats() const;

 private:
  explicit PoolStream(std::shared_ptr<internal::PoolState> state) : state_(std::move(state)) {}

  std::shared_ptr<internal::PoolState> state_;
  ResumeState resume_;
  absl::Status final_status_;
  bool finished_ = false;
};

}  // namespace conveyor::client
