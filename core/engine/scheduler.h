// Internal to the engine: the worker pool and the fair choice of which
// stream a worker serves next. Everything about one stream's work is its
// StreamMachine's (core/engine/stream_machine.h); the scheduler keeps the list of
// streams that need workers, picks round-robin among them, wakes workers,
// and forwards the consumer's calls under its lock.
//
// Locking: one mutex (mu_) guards the scheduler's fields and, by reference,
// every StreamMachine's (see stream_machine.h for why one lock). Tasks
// (reading files, decoding) run without it; consumer callbacks and logging
// run after it is released.
//
// Waking: a worker sleeps on work_cv_ only when no stream has a task it may
// run. Whoever makes work runnable wakes one sleeping worker, and a worker
// that takes a task while more runnable work and sleeping workers remain
// wakes one more (a baton), so every runnable task finds a worker without
// waking the whole pool after every task; only shutdown wakes all. A fetch
// waiting to be retried after an error of the system is taken by the first
// pick after its time; a worker that finds nothing to run waits with the
// earliest retry time as its deadline unless another worker already waits
// for an earlier one (the "timer" worker), so a due retry waits at most for
// a running task to end. Consumers blocked in Next wait on their own
// stream's condition variable.
//
// Network reads: a fetch of a source that reads asynchronously is parked
// (StreamMachine::Park, RunFetchAsync): the worker that picked it starts the
// read and goes on with other work; the read's done (FetchDone, from the
// I/O thread or the thread that cancels) queues the finished task in
// completed_ and wakes one worker, which completes it like any task. No
// worker ever waits on the network. Shutdown fails every stream, which
// cancels their parked reads, and workers exit only once no parked fetch
// is left (their dones come promptly: PendingRead's contract).
//
// Lifetime: a stream is registered from OpenStream until it can leave
// (StreamMachine::CanLeave: no task in flight, and it failed, was cancelled,
// or produced everything and its consumer took it all or left). Every call
// that can make that true ends with MaybeUnregister; debug builds assert it.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/engine/engine.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

class Scheduler {
 public:
  explicit Scheduler(const EngineOptions& options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  void Start();
  // Fails every stream with UNAVAILABLE (cancelling their parked reads) and
  // joins the workers once every parked fetch came back. Idempotent.
  void Shutdown();

  // The mutex every StreamMachine of this scheduler is guarded by.
  Mutex* mu() ABSL_LOCK_RETURNED(mu_) { return &mu_; }
  // Makes a fully built stream runnable (or fails it if shutting down).
  void Register(const std::shared_ptr<StreamMachine>& s);

  // The consumer's calls (see Stream), each under mu_.
  Stream::Poll TryNext(StreamMachine* s, BatchInfo* batch, absl::Status* error);
  absl::StatusOr<std::optional<BatchInfo>> Next(StreamMachine* s, absl::Duration timeout);
  absl::Status Release(StreamMachine* s, uint32_t slot);
  void Cancel(StreamMachine* s, absl::Status why);
  // The Stream handle is being destroyed: cancel, and let the stream leave
  // whatever it still holds.
  void Close(StreamMachine* s);
  void SetReadyCallback(StreamMachine* s, std::function<void()> cb);
  // A finisher's done for batch `sequence` of s (from any thread, no lock
  // held; s lives: see StreamMachine's finish step).
  void FinishDone(StreamMachine* s, uint64_t sequence, absl::Status status);
  // A parked fetch's read is done (StreamMachine::Config::fetch_done): t
  // is queued for a worker to complete. From any thread, no lock held.
  void FetchDone(Task t);
  StreamStats Stats(StreamMachine* s);
  EngineStats Stats();
  SchedulerStats scheduler_stats();

  const EngineOptions& options() const { return options_; }
  uint64_t NextStreamId() { return next_stream_id_.fetch_add(1) + 1; }

 private:
  void WorkerLoop();
  // Round-robin over the registered streams from rr_. When nothing may run
  // only because retries are not due, *retry_at is their earliest time.
  bool PickTask(uint64_t now, Task* t, uint64_t* retry_at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether some registered stream has a task that may run now (`hint`,
  // the stream most likely to, is looked at first).
  bool AnyRunnable(uint64_t now, StreamMachine* hint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Wakes one sleeping worker, unless every sleeper was already woken.
  void WakeOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unregisters s if it can leave; the scheduler's reference goes to
  // out->retired, to be dropped once mu_ is released.
  void MaybeUnregister(StreamMachine* s, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- constant after construction
  const EngineOptions options_;
  const uint64_t created_ns_;
  std::atomic<uint64_t> next_stream_id_{0};
  std::vector<std::thread> workers_;  // touched by Start/Shutdown only

  Mutex mu_;
  CondVar work_cv_;  // idle workers wait here

  // ---- guarded by mu_
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<StreamMachine>> streams_ ABSL_GUARDED_BY(mu_);  // registered
  size_t rr_ ABSL_GUARDED_BY(mu_) = 0;  // where the next pick starts
  uint64_t streams_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<StageStats, kNumStages> finished_totals_ ABSL_GUARDED_BY(mu_);
  uint32_t idle_ ABSL_GUARDED_BY(mu_) = 0;           // workers waiting on work_cv_
  uint32_t wakes_pending_ ABSL_GUARDED_BY(mu_) = 0;  // signalled, not yet awake
  // Deadline of the timer worker's wait (StreamMachine::kNever: none).
  uint64_t timer_at_ ABSL_GUARDED_BY(mu_) = StreamMachine::kNever;
  SchedulerStats sched_stats_ ABSL_GUARDED_BY(mu_);
  // Parked fetches whose read is under way, and those done, to complete.
  uint32_t parked_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Task> completed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor
