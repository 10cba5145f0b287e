// Internal to the engine: the worker pool and the task scheduler that every
// Stream and the Engine forward to. One mutex (mu_) guards all scheduling
// state; tasks (reading files, decoding) run without it. Callbacks and
// logging happen outside it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/mutex.h"
#include "core/engine.h"
#include "core/stream_state.h"

namespace conveyor {

class SampleTransformer;

class Scheduler : public std::enable_shared_from_this<Scheduler> {
 public:
  explicit Scheduler(const EngineOptions& options);
  ~Scheduler();

  void Start();
  void Shutdown();

  // Takes ownership of a fully built state and makes it runnable.
  void Register(const std::shared_ptr<StreamState>& s);

  Stream::Poll TryNext(StreamState* s, BatchInfo* batch, absl::Status* error);
  absl::StatusOr<std::optional<BatchInfo>> Next(StreamState* s, absl::Duration timeout);
  absl::Status Release(StreamState* s, uint32_t slot);
  void Cancel(StreamState* s, absl::Status why);
  void SetReadyCallback(StreamState* s, std::function<void()> cb);
  StreamStats Stats(StreamState* s);
  EngineStats Stats();

  const EngineOptions& options() const { return options_; }
  uint64_t NextStreamId() { return next_stream_id_.fetch_add(1) + 1; }
  uint64_t BatchesInEpoch(const StreamState& s, uint64_t epoch) const;

 private:
  enum class TaskKind { kSample, kFetch, kDecode };
  struct Task {
    TaskKind kind;
    std::shared_ptr<StreamState> stream;
    BatchWork* batch = nullptr;
    uint32_t position = 0;
    uint32_t buffer = 0;
    uint64_t epoch = 0;
    // Results, filled by Run.
    absl::Status status;
    std::shared_ptr<const EpochPlan> plan;
    uint64_t started_ns = 0, finished_ns = 0;
  };

  void WorkerLoop();
  bool PickTask(Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PickTaskFor(const std::shared_ptr<StreamState>& s, Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartBatches(StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunTask(Task* t, SampleTransformer* transformer);
  // Returns true when the stream has something new for its consumer.
  bool Complete(Task* t, BatchWork** needs_compaction) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool EmitInOrder(StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fail(StreamState* s, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateClocks(StreamState* s, uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeUnregister(StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordFailure(StreamState* s, BatchWork* b, uint32_t pos, const absl::Status& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify(StreamState* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void CompactBatch(StreamState* s, BatchWork* b);
  static void AddStages(std::array<StageStats, kNumStages>* into,
                        const std::array<StageStats, kNumStages>& from);
  void SnapshotStages(StreamState* s, uint64_t now, std::array<StageStats, kNumStages>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EngineOptions options_;
  const uint64_t created_ns_;
  std::atomic<uint64_t> next_stream_id_{0};

  Mutex mu_;
  CondVar work_cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<StreamState>> streams_ ABSL_GUARDED_BY(mu_);
  size_t rr_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t streams_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<StageStats, kNumStages> finished_totals_ ABSL_GUARDED_BY(mu_);
  // Callbacks to run once mu_ is released (collected by Notify).
  std::vector<std::function<void()>> pending_callbacks_ ABSL_GUARDED_BY(mu_);
  // Warnings to log once mu_ is released (EmitInOrder runs under it).
  std::vector<std::string> pending_warnings_ ABSL_GUARDED_BY(mu_);

  std::vector<std::thread> workers_;
};

}  // namespace conveyor
