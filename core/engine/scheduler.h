// Internal to the engine: the worker pool and the fair choice of which
// stream a worker serves next. Everything about one stream's work is its
// StreamMachine's (core/engine/stream_machine.h); the scheduler keeps the list of
// streams that need workers, picks among them fairly, wakes workers, holds
// the pool to its CPU budget, and forwards the consumer's calls under its
// lock.
//
// Fair sharing (StreamOptions::client, weight): the streams of one client
// form a ClientGroup. Each group has a virtual time, advanced by the CPU
// time of each of its tasks (the worker thread's, ThreadCpuNs) divided by
// its weight. A pick tries the groups in order of virtual time, lowest
// first, and round-robin among a group's streams; so under contention the
// groups' CPU time goes in proportion to their weights (stride scheduling).
// A group with nothing runnable is passed over and is charged nothing. A
// group with no task in flight that becomes runnable again has its virtual
// time raised to the lowest of the groups that have tasks in flight (or,
// with none, to the virtual time of the latest pick): time spent idle is
// not banked, so a client that returns cannot burst past the others for
// longer than its one task. Tasks are charged when they complete, so
// workers running tasks of one group at once can give it up to that many
// tasks' lead, which later picks pay back. With a single group nothing is
// clocked (its virtual time stays; a group that joins starts level).
//
// CPU budget (EngineOptions::cpu_budget): a token bucket of CPU time,
// refilled at cpu_budget CPUs and at most kCpuBudgetBurst × cpu_budget
// deep, is charged with the CPU time the whole process used
// (CLOCK_PROCESS_CPUTIME_ID) each time a worker comes back for work: the
// gRPC, transport and I/O threads work for the streams too, so the process
// as a whole keeps to the budget while its workers have work (what those
// threads use beyond it cannot be held back here). A worker that finds the
// bucket empty waits on budget_cv_, which releases the lock, until the
// bucket would have refilled, before taking any task; shutdown wakes it.
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
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/engine/engine.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

// The streams of one client (StreamOptions::client) and their share of the
// pool. Owned by the scheduler; every field is guarded by its mutex.
struct ClientGroup {
  std::string key;    // the client; a stream without one has a group of its own
  double weight = 1;  // of the latest stream registered in it
  // CPU nanoseconds of its tasks / weight, raised when the group wakes.
  double vtime = 0;
  // Passed over by a pick with nothing runnable and nothing in flight: it
  // is woken (its virtual time raised) when it next gets a task.
  bool idle = false;
  std::vector<StreamMachine*> streams;  // registered (the scheduler holds them)
  size_t rr = 0;                        // where the next pick in it starts
  uint32_t inflight = 0;                // its tasks picked and not yet completed
};

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
  // The groups in order of virtual time, round-robin within each (see the
  // header comment). When nothing may run only because retries are not
  // due, *retry_at is their earliest time.
  bool PickTask(uint64_t now, Task* t, uint64_t* retry_at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The virtual time a group waking up (or new) starts from.
  double WakeVtime() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves groups_[i] to its place in the order of virtual time.
  void Reorder(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task of `g` is over: charges it `cpu_ns`.
  void ChargeGroup(ClientGroup* g, uint64_t cpu_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Charges the budget's bucket with the process's CPU time since the last
  // charge (`process_cpu_ns`: its CPU clock now), refilled up to `now` first.
  void ChargeBudget(uint64_t now, uint64_t process_cpu_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a CPU budget: 0 when a worker may take a task at `now`, else the
  // time the bucket is no longer empty.
  uint64_t BudgetWaitUntil(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds s to its client's group (made if new), and takes it out again.
  void JoinGroup(StreamMachine* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeaveGroup(StreamMachine* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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

  // EngineOptions::cpu_budget in CPUs (0: none), and the bucket's depth in ns.
  const double cpu_budget_;
  const double budget_burst_ns_;

  Mutex mu_;
  CondVar work_cv_;    // idle workers wait here
  CondVar budget_cv_;  // workers held back by the CPU budget wait here

  // ---- guarded by mu_
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<StreamMachine>> streams_ ABSL_GUARDED_BY(mu_);  // registered
  // The clients' groups, in order of virtual time (lowest first).
  std::vector<std::unique_ptr<ClientGroup>> groups_ ABSL_GUARDED_BY(mu_);
  // The virtual time of the latest pick's group (never goes down).
  double vfloor_ ABSL_GUARDED_BY(mu_) = 0;
  // The CPU budget's bucket: ns of CPU time the workers may still use
  // (negative: over budget), as of budget_at_.
  double budget_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_at_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t budget_cpu_ ABSL_GUARDED_BY(mu_) = 0;  // the process's CPU clock then
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
