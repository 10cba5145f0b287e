// Internal to the engine: the scheduling state of one stream. Every mutable
// field is guarded by the Scheduler's mutex; the constant part is set before
// the stream is registered and read without the lock.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "core/mutex.h"
#include "core/batch_layout.h"
#include "core/pipeline_config.h"
#include "core/slot_arena.h"
#include "core/stats.h"
#include "core/stream.h"

namespace conveyor {

using EpochPlan = std::vector<uint64_t>;  // this rank's dataset indices, in order

// A batch between its start (a slot was assigned) and its emission.
struct BatchWork {
  uint64_t sequence = 0;
  uint64_t epoch = 0;
  uint64_t batch_in_epoch = 0;
  std::shared_ptr<const EpochPlan> plan;
  uint64_t first = 0;  // index into *plan of the batch's first sample
  uint32_t size = 0;   // samples assigned
  uint32_t slot = 0;
  uint32_t next_fetch = 0;  // next position to fetch
  uint32_t done = 0;        // positions finished (written or failed)
  std::vector<uint8_t> failed;  // per position
  std::vector<std::pair<uint32_t, SampleFailure>> failures;  // (position, failure)
  uint64_t position_after = 0;
  uint64_t offset_after = 0;
  uint64_t epoch_samples = 0;
  bool end_of_epoch = false;
  bool finalized = false;
};

struct FetchedSample {
  BatchWork* batch;
  uint32_t position;
  uint32_t buffer;
};

struct StreamState {
  // Constant after registration.
  uint64_t id = 0;
  std::shared_ptr<const PipelineConfig> pipeline;
  StreamOptions options;
  BatchLayout layout;
  std::unique_ptr<SlotArena> arena;
  uint64_t samples_per_epoch = 0;        // this rank's, full epoch
  uint64_t first_epoch_samples = 0;      // this rank's, first epoch after epoch_offset
  uint64_t total_batches = 0;  // 0: endless
  uint32_t fetch_capacity = 0;
  uint32_t fetch_limit = 0;
  uint32_t decode_limit = 0;
  uint64_t created_ns = 0;
  std::unique_ptr<CondVar> ready_cv = std::make_unique<CondVar>();

  // Guarded by the Scheduler's mutex.
  bool registered = false;  // in the scheduler's list of runnable streams
  bool terminal = false;    // failed or cancelled: no new work
  absl::Status error;       // why it is terminal
  uint64_t next_sequence = 0;  // next batch to start
  uint64_t next_epoch = 0;     // its epoch
  uint64_t next_in_epoch = 0;  // its batch_in_epoch
  uint64_t emitted = 0;        // batches emitted
  uint64_t samples_emitted = 0;
  uint64_t samples_seen = 0;   // samples of emitted batches, failed ones included
  uint64_t samples_failed = 0;
  std::map<uint64_t, std::shared_ptr<const EpochPlan>> plans;
  bool plan_pending = false;
  std::deque<std::unique_ptr<BatchWork>> open;  // started, not emitted, in order
  std::deque<FetchedSample> fetched;
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<uint32_t> free_buffers;
  std::vector<uint32_t> free_slots;
  std::vector<uint8_t> consumer_holds;  // per slot
  std::deque<BatchInfo> ready;
  uint32_t fetch_inflight = 0;
  uint32_t decode_inflight = 0;
  uint32_t tasks_inflight = 0;
  std::function<void()> ready_callback;
  std::array<StageStats, kNumStages> stages;
  std::array<StageClock, kNumStages> clocks;

  bool AllStarted() const { return total_batches != 0 && next_sequence >= total_batches; }
  bool Finished() const { return total_batches != 0 && emitted >= total_batches; }
  StageStats& stage(Stage s) { return stages[static_cast<int>(s)]; }
};

}  // namespace conveyor
