// Engine: the data-loading engine — one worker pool, sized to the machine's
// cores (or to EngineOptions::cpu_budget), shared fairly by every open
// stream of every pipeline.
//
// Each worker repeatedly picks the next runnable task (sample → fetch →
// decode+augment into the batch slot → collate) and never blocks on a full
// queue: a task whose output has no room is not started. Picks are fair
// between clients by weight (StreamOptions::client, weight: stride
// scheduling on the tasks' CPU time, round-robin among one client's
// streams; core/engine/scheduler.h), and a CPU budget holds the process to
// EngineOptions::cpu_budget CPUs. See core/engine/stream.h for the
// per-stream contract.
//
// Thread-safety: all methods are safe to call concurrently. Destroying the
// engine shuts it down (Shutdown): open streams' handles stay valid and
// report UNAVAILABLE. Stream handles may outlive the engine.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/data/file_reader.h"
#include "core/decode/sample_decoder.h"
#include "core/engine/autotune.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/stats.h"
#include "core/engine/stream.h"
#include "core/engine/stream_plan.h"

namespace conveyor {

// Largest worker pool an engine accepts (EngineOptions::num_threads).
inline constexpr int kMaxEngineThreads = 1024;
// CPU time the workers may run ahead of EngineOptions::cpu_budget (the
// token bucket's depth), per CPU of the budget.
inline constexpr absl::Duration kCpuBudgetBurst = absl::Milliseconds(20);

struct EngineOptions {
  int num_threads = 0;  // 0: the number of cores
  uint32_t fetch_queue_capacity =
      0;  // fetched-but-not-decoded samples per stream; 0: 2×threads (≥ 4)
  uint32_t fetch_concurrency = 4;   // fetch tasks running at once per stream
  uint32_t decode_concurrency = 0;  // decode tasks running at once per stream; 0: threads
  // Bytes of fetched samples a stream may hold (waiting for decode or being
  // decoded): no fetch starts while the stream holds this much, and a read
  // of a local sample that would take it past this waits for room and is
  // read again; so at most max(fetch_queue_bytes, max_file_bytes) are held,
  // plus the reads running (core/engine/stream_machine.h). Network reads are
  // kept whatever their size: fetch_queue_bytes + fetch_concurrency ×
  // max_file_bytes at most.
  uint64_t fetch_queue_bytes = 64ull << 20;  // ≥ 1

  // Each stream tunes its own fetch concurrency, decode concurrency and
  // fetch queue capacity (core/engine/autotune.h), starting from the three
  // above and never past autotune_max_fetch_concurrency reads, the pool's
  // threads in decodes (or decode_concurrency if larger), and a queue of
  // autotune_max_fetch_concurrency + 2 × threads (or fetch_queue_capacity
  // if larger). fetch_queue_bytes still bounds the bytes read ahead. On by
  // default; set false for fixed limits (tests and benchmarks of a stage).
  bool autotune = true;
  uint32_t autotune_max_fetch_concurrency = 64;            // ≥ 1
  absl::Duration autotune_tick = absl::Milliseconds(250);  // > 0

  // Errors of the system while fetching a sample (IsSystemError: EMFILE,
  // ENFILE, ENOMEM, EIO, EAGAIN, ...) are retried: the fetch is queued again
  // to run after a backoff of fetch_retry_initial_backoff, doubling each time
  // up to fetch_retry_max_backoff. No worker sleeps meanwhile: it runs other
  // work, or waits for the earliest retry with a deadline. Once a sample has
  // been tried fetch_retry_max_attempts times, or fetch_retry_deadline has
  // passed since its first failure, the stream fails with UNAVAILABLE naming
  // the file and the errno (a retryable status for the client).
  uint32_t fetch_retry_max_attempts = 8;                                // ≥ 1; 1: no retry
  absl::Duration fetch_retry_initial_backoff = absl::Milliseconds(10);  // ≥ 0
  absl::Duration fetch_retry_max_backoff = absl::Seconds(1);            // ≥ initial
  absl::Duration fetch_retry_deadline = absl::Seconds(30);              // > 0

  // CPUs the workers may use together (1.5: 1.5 CPU-seconds per second),
  // whatever the number of streams; 0: no limit. The pool then has at most
  // ceil(cpu_budget) workers, and each worker accounts the CPU time of its
  // own thread: while the pool is over budget (a token bucket refilled at
  // cpu_budget CPUs, holding at most kCpuBudgetBurst of CPU time) workers
  // wait before taking their next task. The daemon's other threads (gRPC,
  // I/O) are not counted.
  double cpu_budget = 0;  // ≥ 0, finite

  // Makes the per-worker-thread decoder of the decode stage. Null: a
  // MediaDecoder (the decoder of the pipeline's kind, core/decode/media_decoder.h).
  // Other decoders (synthetic ones for benchmarks) plug in here.
  SampleDecoderFactory decoder_factory;

  // Reads the files of pipelines without a source of their own (the
  // default FileSampleSource, core/data/file_reader.h). Null: plain pread.
  // Tests pass a reader that injects faults.
  std::shared_ptr<const FileReader> file_reader;
};

// The most a tuned stream's limits may reach under `options` (effective
// values: num_threads and decode_concurrency already resolved from 0).
AutotuneLimits AutotuneMaxLimits(const EngineOptions& options);

// The scheduler's own cost, summed over workers since the engine started:
// what a worker spends per task outside the task itself.
struct SchedulerStats {
  uint64_t tasks_run = 0;
  uint64_t lock_acquisitions = 0;  // by workers
  uint64_t lock_wait_ns = 0;       // waiting to acquire the scheduler lock
  uint64_t lock_hold_ns = 0;       // holding it (picking and completing tasks)
  uint64_t wakeups = 0;            // workers woken to look for work
  uint64_t idle_wakeups = 0;       // ... that found none
  // EngineOptions::cpu_budget: waits of workers while the pool was over
  // budget, and their total length.
  uint64_t budget_waits = 0;
  uint64_t budget_wait_ns = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens a stream on `pipeline` with its own slot arena of
  // plan.arena_bytes, of the options' memory kind, and attaches the options'
  // finisher to it. Errors of the options as PlanStream's; an error of
  // the finisher's Attach, as it is.
  absl::StatusOr<std::unique_ptr<Stream>> OpenStream(std::shared_ptr<const PipelineConfig> pipeline,
                                                     const StreamOptions& options);
  // The same from a plan already made (the service plans a stream to check
  // it against its budget first). REQUIRES: `plan` is PlanStream's for this
  // pipeline.
  absl::StatusOr<std::unique_ptr<Stream>> OpenStream(std::shared_ptr<const PipelineConfig> pipeline,
                                                     StreamPlan plan);

  EngineStats Stats() const;
  SchedulerStats scheduler_stats() const;
  int num_threads() const;

  // Fails every open stream with UNAVAILABLE ("engine shutting down"), lets
  // the workers finish the tasks they run, and joins them. Idempotent.
  void Shutdown();

 private:
  explicit Engine(std::shared_ptr<Scheduler> scheduler) : scheduler_(std::move(scheduler)) {}
  std::shared_ptr<Scheduler> scheduler_;
};

}  // namespace conveyor
