// Engine: the data-loading engine — one worker pool, sized to the machine's
// cores, shared fairly by every open stream of every pipeline.
//
// Each worker repeatedly picks the next runnable task round-robin over the
// open streams (sample → fetch → decode+augment into the batch slot →
// collate) and never blocks on a full queue: a task whose output has no room
// is not started. See core/stream.h for the per-stream contract.
//
// Thread-safety: all methods are safe to call concurrently. Destroying the
// engine cancels open streams (their handles stay valid and report the
// cancellation) and joins the workers.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/pipeline_config.h"
#include "core/stats.h"
#include "core/stream.h"

namespace conveyor {

struct EngineOptions {
  int num_threads = 0;               // 0: the number of cores
  uint32_t fetch_queue_capacity = 0; // fetched-but-not-decoded samples per stream; 0: 2×threads (≥ 4)
  uint32_t fetch_concurrency = 4;    // fetch tasks running at once per stream
  uint32_t decode_concurrency = 0;   // decode tasks running at once per stream; 0: threads
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens a stream on `pipeline` with its own slot arena of
  // options.num_slots × BatchLayout::For(...).slot_bytes bytes.
  absl::StatusOr<std::unique_ptr<Stream>> OpenStream(std::shared_ptr<const PipelineConfig> pipeline,
                                                     const StreamOptions& options);

  EngineStats Stats() const;
  int num_threads() const;

  // Cancels every stream with `why` and joins the workers. Idempotent.
  void Shutdown();

 private:
  explicit Engine(std::shared_ptr<Scheduler> scheduler) : scheduler_(std::move(scheduler)) {}
  std::shared_ptr<Scheduler> scheduler_;
};

}  // namespace conveyor
