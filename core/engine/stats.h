// Pipeline statistics: what each stage did and what it waited for, enough to
// name the bottleneck stage. Snapshots are plain values (thread-safe to copy);
// StageClock is a small accumulator used under the engine's lock.
//
// Stages, in data-flow order:
//   sample  — computes the epoch order of a stream (once per epoch)
//   fetch   — reads sample files into buffers (network reads on the remote
//             reader's I/O thread: a worker only starts them)
//   decode  — decodes and augments one sample straight into its batch slot
//   collate — completes batches (compacts out failed samples) and emits them
//             in order; waits for output space when the consumer holds every
//             slot of the stream (backpressure)
//   deliver — the transport's finish step, when the stream has one (batches
//             being finished, e.g. copied to the GPU, are its in_flight, and
//             a failed finish its failure), then the consumer: batches ready
//             but not yet taken (queue_size)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace conveyor {

enum class Stage { kSample = 0, kFetch, kDecode, kCollate, kDeliver };
inline constexpr int kNumStages = 5;
const char* ToString(Stage s);

struct StageStats {
  std::string name;
  uint64_t items_in = 0;
  uint64_t items_out = 0;
  uint64_t failures = 0;
  // `failures` split by the absl status code of each failure (index: the
  // code's number, 0-16): a bounded set of reasons for metrics.
  std::array<uint64_t, 17> failures_by_code{};
  uint64_t busy_ns = 0;         // summed task time in this stage (a fetch over the network:
                                // its read's time, though no worker waits for it)
  uint64_t wait_input_ns = 0;   // time with no input to work on (starved)
  uint64_t wait_output_ns = 0;  // time with input but no space to put output
  uint64_t queue_size = 0;      // items waiting in front of this stage now
  uint64_t queue_capacity = 0;  // bound of that queue (0: not a queue)
  uint64_t in_flight = 0;       // tasks of this stage running now
};

struct StreamStats {
  uint64_t stream_id = 0;
  std::string pipeline;
  uint64_t batches_emitted = 0;
  uint64_t samples_emitted = 0;
  uint64_t samples_failed = 0;
  // Samples the pipeline's output cache served (nothing read or decoded),
  // and those it was asked for and did not hold (cache_output).
  uint64_t output_cache_hits = 0;
  uint64_t output_cache_misses = 0;
  uint64_t slots_total = 0;
  uint64_t slots_held_by_consumer = 0;
  uint64_t consumers_waiting = 0;  // threads blocked in Stream::Next now
  uint64_t elapsed_ns = 0;
  // Fetches waiting on an asynchronous read (a network) now, and the oldest
  // of them, so a stream that makes no progress says on what: the object
  // (redacted: no credentials, no query; "" until its read has started),
  // its host, the bytes received so far and how long it has waited.
  struct PendingFetch {
    uint64_t sample_index = 0;
    std::string object;
    std::string host;
    uint64_t bytes_received = 0;
    uint64_t age_ns = 0;
  };
  uint64_t fetches_pending = 0;
  // Reads of local samples whose bytes were dropped for want of room in
  // fetch_queue_bytes and read again later (core/engine/stream_machine.h).
  uint64_t fetches_deferred = 0;
  std::optional<PendingFetch> oldest_fetch;
  std::array<StageStats, kNumStages> stages;
  // The fetch and decode limits in force (EngineOptions' unless the stream
  // is tuned: core/engine/autotune.h), the tuner's changes so far and the
  // reason of its last decision.
  struct Autotune {
    bool enabled = false;
    uint32_t fetch_concurrency = 0;
    uint32_t decode_concurrency = 0;
    uint32_t fetch_queue_capacity = 0;
    uint64_t changes = 0;
    std::string reason;
  } autotune;
};

struct EngineStats {
  int num_threads = 0;
  uint64_t uptime_ns = 0;
  uint64_t streams_open = 0;
  uint64_t streams_total = 0;
  // Counters summed over all streams, open and finished; the gauges
  // (queue_size, queue_capacity, in_flight) over the open streams only.
  std::array<StageStats, kNumStages> stages;
  std::vector<StreamStats> streams;  // open streams only
};

// Counts one failure of `s` with status `why` (failures and failures_by_code).
void CountFailure(StageStats* s, const absl::Status& why);

// The stage with the largest busy time per worker-second, or kDeliver when
// producers mostly wait for the consumer to free slots. A heuristic for humans.
Stage Bottleneck(const std::array<StageStats, kNumStages>& stages);

// The bottleneck of the work going on now: Bottleneck() over the stages of
// the open streams summed, or nullopt when there is no load (no stream open,
// or none has yet spent time working or waiting for its consumer). Streams
// that have finished say nothing about now, so an idle daemon names none.
std::optional<Stage> BottleneckUnderLoad(const std::vector<StreamStats>& open_streams);

// Adds every figure of `from` to `into`, stage by stage.
void AddStages(std::array<StageStats, kNumStages>* into,
               const std::array<StageStats, kNumStages>& from);

// Accumulates how long a stage spent starved / blocked. REQUIRES external
// synchronisation (the engine's lock).
class StageClock {
 public:
  enum State { kActive = 0, kStarved, kBlocked };
  void Set(State s, uint64_t now_ns);
  // Adds the time spent in the current state up to now.
  void AddTo(StageStats* stats, uint64_t now_ns) const;

 private:
  State state_ = kActive;
  uint64_t since_ns_ = 0;
  uint64_t starved_ns_ = 0;
  uint64_t blocked_ns_ = 0;
};

uint64_t MonotonicNanos();

}  // namespace conveyor
