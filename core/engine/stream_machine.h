// Internal to the engine: StreamMachine, the state machine of one stream —
// which task of the stream may run next (sample → fetch → decode), what a
// finished task changes, how batches are collated and emitted in order
// (core/engine/collate.cc), finished by the stream's BatchFinisher when it has
// one, and handed to the consumer (core/engine/deliver.cc). The
// Scheduler (core/engine/scheduler.h) owns the worker pool and only chooses which
// stream a worker serves next; it never looks inside a stream.
//
// Locking: every mutable field is guarded by the engine's one scheduler
// mutex, which the machine references as mu_; methods that touch them say
// so with ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_), checked by clang's
// -Wthread-safety. One lock for the scheduler and all its streams, not one
// per stream, because a worker completes its last task and picks its next
// one (possibly of another stream) in a single critical section: per-stream
// locks would cost two or three lock round trips per task and the fair
// round-robin pick would have to lock every stream it looks at. Critical
// sections are short and allocation-free (bench/scheduler_bench.cc measures
// them). The constant part is set before the stream is registered and read
// without the lock. Task bodies (Run*) run without the lock and touch only
// what their task owns: one fetch buffer, one sample's place in a slot.
//
// Slot accounting (checked in debug builds, CheckInvariants): every slot is
// in exactly one of free_slots_, open_ (being filled), finishing_ (collated,
// handed to the finisher), ready_ (emitted, not taken) or held by the
// consumer. Every fetch buffer is free, queued in fetched_, or owned by one
// running fetch or decode task.
//
// The finish step (StreamOptions::finisher): a collated batch goes into
// finishing_ and its Finish call into the Outbox, made without the lock
// (StartFinish, under finish_mu_). Its `done` reaches FinishDone (through
// Config::finish_done, the scheduler's, so a stream that failed there can
// leave); batches move from the front of finishing_ to ready_ once done,
// so in sequence order. A terminal stream frees a finishing slot when its
// done comes. The Stream handle's destructor calls DrainFinisher after
// Close: no Finish starts after it (finish_mu_), and the finisher's Drain
// waits for every done; so a done never outlives the machine.
//
// Fetches from a network (SampleSource::reads_asynchronously) do not hold a
// worker: the worker that took the fetch only starts it (RunFetchAsync:
// SampleSource::ReadAsync) and the task is parked — still counted in
// tasks_inflight_ and fetch_inflight_, so the stream keeps its fetch bounds
// and cannot leave — until the read's done hands the finished task to
// Config::fetch_done (the scheduler's queue of completed tasks), where a
// worker completes it as any other (Complete). A slow host thus costs its
// stream only its own fetch_limit. Fail and Cancel cancel the stream's
// parked reads (through the Outbox, without the lock), so a terminal
// stream leaves as soon as their dones come.
//
// The output cache (PipelineConfig::output_cache, core/engine/output_cache.h):
// a fetch task first asks the cache for its sample, under the key of the
// file's identity (SampleSource::Identity) and the stream's transform
// (TransformFingerprint). On a hit it copies the cached bytes into the
// sample's place in the slot and completes the position: nothing is read or
// decoded. On a miss the key stays with the fetch buffer (cache_keys_, owned
// like the buffer) and the decode writes into a fresh buffer that it copies
// into the slot and hands to the cache, so the cache never holds bytes taken
// from slot memory, which clients map writable. Failed samples are not
// cached. Streams of a source that reads over the network do not use it.
//
// Autotune (Config::autotune, core/engine/autotune.h): the fetch and decode
// limits are limits_, which start at the config's. UpdateClocks also marks
// what held the stream back (AutotuneClock); the Complete that ends a tick
// of the tuner's feeds it that tick and applies the limits it chose. A
// lower limit only stops new tasks: those running finish.
//
// Memory of fetched samples: held_bytes_ counts the samples fetched and not
// yet decoded (queued or being decoded), reserved_bytes_ the reads started
// with room set aside (below); both are charged against fetch_bytes. No
// fetch starts while they reach it. A read on a worker (a local file or tar
// member) whose bytes would take them past fetch_bytes while anything else is
// charged is not kept: its bytes are dropped and it waits, as a deferred
// retry, until there is room for its size (or nothing else is charged), then
// is read again with that room reserved; no new sample is fetched while one
// waits, so it is never starved. A stream thus holds at most
// max(fetch_bytes, max_file_bytes) of fetched samples, plus the reads in
// progress, which each hold a worker (whatever fetch_limit the tuner set).
// Network reads (parked) are kept whatever their size, so a stream of a
// network source holds at most fetch_bytes + fetch_limit × max_file_bytes.
// Idle buffers keep their capacity up to kKeptFetchBufferBytes, and only the
// first kept_buffers_ of them (as many as the config's limits use): those
// the tuner's higher limits added are freed once their sample is decoded.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "core/base/mutex.h"
#include "core/data/file_reader.h"
#include "core/data/pending_read.h"
#include "core/data/sampler.h"
#include "core/decode/sample_decoder.h"
#include "core/engine/autotune.h"
#include "core/engine/batch_layout.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/slot_arena.h"
#include "core/engine/stats.h"
#include "core/engine/stream.h"
#include "core/engine/stream_plan.h"

namespace conveyor {

struct EngineOptions;

using EpochPlan = RankPlan;  // this rank's dataset indices, in order (core/data/sampler.h)

// A batch between its start (a slot was assigned) and its emission. Owned by
// the machine's open_ queue; tasks in flight point at it (open_ entries are
// only dropped once emitted, and a terminal stream keeps them until freed).
struct BatchWork {
  uint64_t sequence = 0;
  uint64_t epoch = 0;
  uint64_t batch_in_epoch = 0;
  std::shared_ptr<const EpochPlan> plan;
  uint64_t first = 0;  // index into *plan of the batch's first sample
  uint32_t size = 0;   // samples assigned
  uint32_t slot = 0;
  uint32_t next_fetch = 0;      // next position to fetch
  uint32_t done = 0;            // positions finished (written or failed)
  std::vector<uint8_t> failed;  // per position
  std::vector<std::pair<uint32_t, SampleFailure>> failures;  // (position, failure)
  uint64_t position_after = 0;
  uint64_t offset_after = 0;
  uint64_t epoch_samples = 0;
  bool end_of_epoch = false;
  bool finalized = false;  // complete and compacted: may be emitted

  uint64_t sample_index(uint32_t position) const { return (*plan)[first + position]; }
};

class StreamMachine;
struct ClientGroup;  // the scheduler's fair-share group (core/engine/scheduler.h)

enum class TaskKind : uint8_t { kSample, kFetch, kDecode };

// One unit of work a worker runs without the lock.
struct Task {
  TaskKind kind = TaskKind::kSample;
  // Not owning: a stream stays registered (so alive) while it has tasks in
  // flight.
  StreamMachine* stream = nullptr;
  BatchWork* batch = nullptr;
  uint32_t position = 0;
  uint32_t buffer = 0;
  uint32_t attempt = 0;           // fetch: earlier attempts that hit a system error
  uint64_t first_failure_ns = 0;  // fetch: when the first of them failed
  uint64_t epoch = 0;             // sample: the epoch to plan
  bool parked = false;            // fetch: read asynchronously (RunFetchAsync)
  bool cache_lookup = false;      // fetch: the output cache was asked (a miss unless cache_hit)
  bool cache_hit = false;         // fetch: the sample was written from the output cache
  uint64_t reserved_bytes = 0;    // fetch: room of fetch_bytes set aside for it (deferred)
  uint64_t park_serial = 0;       // parked: which Park it was (buffers are reused)
  // Results, filled by Run.
  absl::Status status;
  std::shared_ptr<const EpochPlan> plan;
  uint64_t started_ns = 0, finished_ns = 0;
  // CPU time of the worker's thread running it (set by the scheduler; the
  // start of a parked fetch is not counted to its group).
  uint64_t cpu_ns = 0;
};

// What a thread collects under the lock and acts on once it is released:
// consumer callbacks to run, warnings to log, and streams that left the
// scheduler (their last reference may be this one: freeing an arena unmaps
// memory, which is not done under the lock). Owned by one thread.
struct Outbox {
  // A collated batch to hand to its stream's finisher (StartFinish); the
  // reference keeps the machine alive until the call is made.
  struct PendingFinish {
    std::shared_ptr<StreamMachine> stream;
    BatchInfo batch;
  };
  std::vector<std::function<void()>> callbacks;
  std::vector<std::string> warnings;
  std::vector<std::string> debug_lines;  // logged at debug level
  std::vector<PendingFinish> finishes;
  std::vector<std::shared_ptr<StreamMachine>> retired;
  bool empty() const {
    return callbacks.empty() && warnings.empty() && debug_lines.empty() && finishes.empty() &&
           retired.empty();
  }
  // Logs, starts the finishes, runs the callbacks and lets go of
  // everything, then clears (keeps capacity).
  void Flush();
};

// The retry schedule of fetches that hit errors of the system, in monotonic
// nanoseconds (from EngineOptions).
struct RetryPolicy {
  uint32_t max_attempts = 8;
  uint64_t initial_backoff_ns = 10'000'000;
  uint64_t max_backoff_ns = 1'000'000'000;
  uint64_t deadline_ns = 30'000'000'000;
  // Backoff before attempt `attempt` + 1, after `attempt` failures (≥ 1).
  uint64_t BackoffNs(uint32_t attempt) const;
};

class StreamMachine : public std::enable_shared_from_this<StreamMachine> {
 public:
  static constexpr uint64_t kNever = ~uint64_t{0};

  // Everything constant about a stream, fixed before it is registered.
  struct Config {
    uint64_t id = 0;
    std::shared_ptr<const PipelineConfig> pipeline;
    // The stream's geometry and its effective options (core/engine/stream_plan.h).
    StreamPlan plan;
    uint32_t fetch_capacity = 0;
    uint32_t fetch_limit = 0;
    uint64_t fetch_bytes = 0;  // EngineOptions::fetch_queue_bytes
    uint32_t decode_limit = 0;
    // EngineOptions::autotune: fetch_limit, decode_limit and fetch_capacity
    // are where the stream's tuner starts (core/engine/autotune.h), and
    // autotune_max where it stops; fetch buffers are made for the maximum.
    bool autotune = false;
    AutotuneLimits autotune_max;
    StreamTuner::Options autotune_options;
    RetryPolicy retry;
    std::shared_ptr<const FileReader> file_reader;  // EngineOptions::file_reader
    // Where a finisher's `done` goes (the engine sets it to the scheduler's
    // FinishDone). Called without any lock held. Needed with a finisher.
    std::function<void(StreamMachine*, uint64_t sequence, absl::Status)> finish_done;
    // Where a parked fetch goes when its read is done (the engine sets it to
    // the scheduler's FetchDone), with its status set. Called from any
    // thread without any lock held. Needed when the source reads
    // asynchronously.
    std::function<void(Task)> fetch_done;
  };

  // REQUIRES: *mu outlives the machine (it is the scheduler's mutex); the
  // machine is owned by shared_ptrs (make_shared); the finisher, if any, was
  // attached to `arena`.
  StreamMachine(Config config, std::unique_ptr<SlotArena> arena, Mutex* mu);
  StreamMachine(const StreamMachine&) = delete;
  StreamMachine& operator=(const StreamMachine&) = delete;

  // ---- constant after construction: read without the lock
  const Config& config() const { return config_; }
  uint64_t id() const { return config_.id; }
  const SlotArena& arena() const { return *arena_; }
  uint64_t BatchesInEpoch(uint64_t epoch) const;
  Mutex& mu() const ABSL_LOCK_RETURNED(mu_) { return mu_; }

  // ---- registration (the scheduler's list of streams that need workers)
  bool registered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return registered_; }
  void set_registered(bool r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { registered_ = r; }
  // The scheduler's group of this stream's client, while registered.
  ClientGroup* group() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return group_; }
  void set_group(ClientGroup* g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { group_ = g; }
  // Whether the stream no longer needs a worker nor its place in the
  // scheduler: no task in flight, and it failed or was cancelled, or it
  // produced every batch and either the consumer took them all or left.
  bool CanLeave() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t tasks_inflight() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return tasks_inflight_; }
  bool consumer_gone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return consumer_gone_; }
  // A task PickTask handed out is over (after Complete, and after
  // FinishCompaction when Complete asked for one).
  void EndTask() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { --tasks_inflight_; }

  // ---- the pipeline, stage by stage (core/engine/stream_machine.cc)
  // Picks the next task of this stream that may run at `now`, if any: first
  // starts batches into free slots, then plans an epoch (sample), decodes a
  // fetched sample, or fetches one (retries first, once due). When nothing
  // may run only because a retry is not due yet, lowers *retry_at to its time.
  bool PickTask(uint64_t now, Task* t, uint64_t* retry_at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether PickTask would find a task at `now` (for waking idle workers).
  bool HasRunnableTask(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs t without the lock. REQUIRES: t came from this machine's PickTask
  // and is not parked.
  void RunTask(Task* t, SampleDecoder* decoder) const;

  // ---- asynchronous fetches (see the header comment)
  // Whether fetch tasks are parked (the source reads asynchronously).
  bool fetches_asynchronously() const { return source_->reads_asynchronously(); }
  // Marks fetch task t (just picked) parked: its read is about to start.
  void Park(Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts t's read without the lock and returns; the read's done passes t
  // to Config::fetch_done. REQUIRES: Park(t) ran; `self` is this machine
  // (keeps it alive while the call needs it).
  void RunFetchAsync(Task t, std::shared_ptr<StreamMachine> self) ABSL_LOCKS_EXCLUDED(mu_);
  // The parked read of `buffer` is done (its task goes to Complete next).
  // Returns its handle, to be dropped once the lock is released.
  std::shared_ptr<PendingRead> Unpark(uint32_t buffer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies a finished task. Returns a batch that completed with failures and
  // must be compacted (CompactBatch, without the lock) and then passed to
  // FinishCompaction; nullptr otherwise.
  BatchWork* Complete(Task* t, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- collate (core/engine/collate.cc)
  // Moves the surviving samples of a batch with failures together. REQUIRES:
  // every task of `b` finished (so nothing else touches its slot). Lock-free.
  void CompactBatch(const BatchWork& b) const;
  void FinishCompaction(BatchWork* b, uint64_t busy_ns, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- finish (core/engine/collate.cc)
  // Hands `batch` to the finisher, unless DrainFinisher already ran (then
  // the stream is terminal and the batch is dropped). Without the lock.
  void StartFinish(const BatchInfo& batch) ABSL_LOCKS_EXCLUDED(mu_, finish_mu_);
  // The finisher's `done` for batch `sequence`.
  void FinishDone(uint64_t sequence, absl::Status status, Outbox* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No Finish starts from now on, and returns once the finisher drained
  // (every done returned). Called by the Stream handle's destructor after
  // Close, without the lock. Idempotent; nothing without a finisher.
  void DrainFinisher() ABSL_LOCKS_EXCLUDED(mu_, finish_mu_);

  // ---- deliver: the consumer API (core/engine/deliver.cc)
  Stream::Poll TryNext(BatchInfo* batch, absl::Status* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits on this stream's own condition variable until TryNext may return
  // something new or `deadline` passes. Returns false on timeout with
  // nothing new.
  bool WaitForNews(absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns a slot the consumer holds to the free slots. InvalidArgument if
  // the consumer does not hold it.
  absl::Status Release(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the stream (see Stream::Cancel). `consumer_gone`: the handle is
  // being destroyed, nobody will read again.
  void Cancel(absl::Status why, bool consumer_gone, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetReadyCallback(std::function<void()> cb) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Fails the stream with `why` (first failure wins): no new work, queued
  // work dropped, consumer woken.
  void Fail(absl::Status why, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool terminal() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return terminal_; }

  // ---- statistics
  void UpdateClocks(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SnapshotStages(uint64_t now, std::array<StageStats, kNumStages>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StreamStats Stats(uint64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Debug builds: asserts the slot and buffer accounting. Release: nothing.
  void CheckInvariants() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  // A fetch that hit an error of the system, waiting for its next attempt.
  struct PendingRetry {
    BatchWork* batch;
    uint32_t position;
    uint32_t attempt;  // failures so far
    uint64_t not_before_ns;
    uint64_t first_failure_ns;
    // A read dropped for want of room in fetch_bytes (not an error): due
    // once needs_bytes fit (DeferredFits), whatever not_before_ns says.
    uint64_t needs_bytes = 0;
    bool deferred = false;
  };

  bool AllStarted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return config_.plan.total_batches != 0 && next_sequence_ >= config_.plan.total_batches;
  }
  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return config_.plan.total_batches != 0 && emitted_ >= config_.plan.total_batches;
  }
  StageStats& stage(Stage s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stages_[static_cast<int>(s)];
  }

  // Stage by stage: whether a task may start, taking it, applying it.
  void StartBatches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CanSample() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch a sample task should plan now, or kNever: the epoch of the
  // next batch to start, else (once fewer than the prefetch window of its
  // samples remain to start) the one after it, when the stream has it.
  uint64_t EpochToPlan() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Announces to the source (SampleSource::Prefetch) the samples after
  // `position` of `b`, up to the prefetch window, into the next epoch.
  void AnnounceAfter(const BatchWork& b, uint32_t position) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the stream delivers `epoch` (streams are whole epochs).
  bool HasEpoch(uint64_t epoch) const;
  void TakeSample(Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteSample(Task* t, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunSample(Task* t) const;

  bool FetchRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Bytes charged against fetch_bytes: fetched samples and reserved room.
  uint64_t ChargedBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return held_bytes_ + reserved_bytes_;
  }
  bool DeferredFits(const PendingRetry& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t charged = ChargedBytes();
    return charged == 0 || charged + r.needs_bytes <= config_.fetch_bytes;
  }
  // The capacity buffer `buffer` may keep while idle (see the header).
  size_t KeptCapacity(uint32_t buffer) const;
  // Empties a fetch buffer whose bytes are not kept and frees it; memory
  // past its KeptCapacity is released through `out`, after the lock.
  void DropFetchedBytes(uint32_t buffer, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BatchWork* Fetchable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Index of a due retry in retries_, or -1; lowers *retry_at otherwise.
  int DueRetry(uint64_t now, uint64_t* retry_at) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeFetch(uint64_t now, Task* t, uint64_t* retry_at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BatchWork* CompleteFetch(Task* t, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunFetch(Task* t) const;
  // The output cache's part of a fetch: true when the sample was written
  // into its slot from the cache (t->cache_hit); otherwise leaves the key
  // for the decode in cache_keys_[t->buffer] (empty: not cached).
  bool ServeFromCache(Task* t, uint64_t index) const;
  // Writes the label and dataset index of sample `index` at `position`.
  void WriteLabelAndIndex(uint8_t* slot, uint32_t position, uint64_t index) const;
  // Writes sample `index`'s fields at `position` of the slot's field areas
  // (BatchLayout) from `read`, the bytes fetched for it. An error of the
  // sample (a value that fails CheckFieldValue, a required member missing)
  // names the field. Lock-free: the position is the task's.
  // Boxes and masks move with the image by the geometry of `decoder`'s last
  // Run (LastGeometry; none: such a field fails); masks are decoded by it.
  absl::Status WriteFields(uint8_t* slot, uint32_t position, uint64_t index,
                           std::span<const uint8_t> read, SampleDecoder* decoder) const;
  // Queues the cancellation of every parked read that has its handle.
  void CancelParked(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With a tuner: feeds it the tick that ended at `now`, if one did, and
  // applies what it chose (logged at debug level through `out`).
  void MaybeTune(uint64_t now, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  bool CanDecode() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeDecode(Task* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  BatchWork* CompleteDecode(Task* t, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunDecode(Task* t, SampleDecoder* decoder) const;

  // Collate (core/engine/collate.cc).
  void RecordFailure(BatchWork* b, uint32_t pos, const absl::Status& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A position of b finished; returns b when that completed it with
  // failures (to compact), emits it when it completed cleanly.
  BatchWork* PositionDone(BatchWork* b, Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitInOrder(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a collated (and finished) batch ready for the consumer.
  void MakeReady(BatchInfo info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the finished batches at the front of finishing_ to ready_ (or
  // fails the stream with the first error among them).
  void ReadyFinished(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A terminal stream: frees the slots of finishing_ batches whose done came.
  void DropFinished() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Deliver (core/engine/deliver.cc): wakes the consumer and queues its callback.
  void Notify(Outbox* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns ready batches' slots to free_slots_ (they will not be taken).
  void DropReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- constant after construction
  const Config config_;
  const std::unique_ptr<SlotArena> arena_;
  const SampleSource* source_;  // config_.pipeline->source, or default_source_
  const std::unique_ptr<SampleSource> default_source_;
  const uint64_t created_ns_;
  // Fetch buffers: the vector is fixed; buffer i's bytes belong to whoever
  // holds index i (free_buffers_, a fetched_ entry, or one running task).
  mutable std::vector<std::vector<uint8_t>> buffers_;
  // The output cache, or null (none, or the source reads asynchronously);
  // the transform's part of its keys; each fetch buffer's key (held with the
  // buffer, like buffers_; empty: the sample is not to be cached).
  OutputCache* const cache_;
  const std::string transform_key_;
  mutable std::vector<std::string> cache_keys_;

  Mutex& mu_;
  // Consumers blocked in Next wait here (not on the workers' condvar).
  CondVar ready_cv_;
  // Orders Finish calls against DrainFinisher (taken before mu_, never
  // under it: a done may run inside Finish and take mu_).
  Mutex finish_mu_;
  bool finisher_drained_ ABSL_GUARDED_BY(finish_mu_) = false;

  // ---- guarded by mu_
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  ClientGroup* group_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool terminal_ ABSL_GUARDED_BY(mu_) = false;  // failed or cancelled: no new work
  // terminal_, for decodes running without the lock (their TaskCancelScope:
  // core/base/task_cancel.h): set once by Fail, read from any thread.
  std::atomic<bool> stop_decoding_{false};
  bool consumer_gone_ ABSL_GUARDED_BY(mu_) = false;  // the Stream handle is gone
  absl::Status error_ ABSL_GUARDED_BY(mu_);          // why it is terminal
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 0;  // next batch to start
  uint64_t next_epoch_ ABSL_GUARDED_BY(mu_) = 0;     // its epoch
  uint64_t next_in_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // its batch_in_epoch
  uint64_t emitted_ ABSL_GUARDED_BY(mu_) = 0;        // batches emitted
  uint64_t samples_emitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t samples_seen_ ABSL_GUARDED_BY(mu_) = 0;  // of emitted batches, failed included
  uint64_t samples_failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cache_hits_ ABSL_GUARDED_BY(mu_) = 0;    // samples served by the output cache
  uint64_t cache_misses_ ABSL_GUARDED_BY(mu_) = 0;  // asked of it and not there
  std::map<uint64_t, std::shared_ptr<const EpochPlan>> plans_ ABSL_GUARDED_BY(mu_);
  bool plan_pending_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::unique_ptr<BatchWork>> open_ ABSL_GUARDED_BY(mu_);  // started, in order
  struct Fetched {
    BatchWork* batch;
    uint32_t position;
    uint32_t buffer;
  };
  std::deque<Fetched> fetched_ ABSL_GUARDED_BY(mu_);
  std::vector<PendingRetry> retries_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint8_t> consumer_holds_ ABSL_GUARDED_BY(mu_);  // per slot
  uint32_t slots_held_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<BatchInfo> ready_ ABSL_GUARDED_BY(mu_);
  // Collated batches handed to the finisher, in sequence order.
  struct Finishing {
    BatchInfo batch;
    bool done = false;  // its done came, with `status`
    absl::Status status;
  };
  std::deque<Finishing> finishing_ ABSL_GUARDED_BY(mu_);
  uint32_t fetch_inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // Parked fetches, by fetch buffer (a fetch in flight owns its buffer):
  // active from Park to Unpark; `read` is set once ReadAsync returned a
  // handle (null until then, and when done ran before it returned).
  struct Parked {
    bool active = false;
    uint64_t started_ns = 0;
    uint64_t index = 0;  // the sample read
    uint64_t serial = 0;
    std::shared_ptr<PendingRead> read;
  };
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
  uint32_t parked_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t park_serials_ ABSL_GUARDED_BY(mu_) = 0;
  // Bytes of the fetched samples in fetched_ or being decoded (each
  // buffer's size when its fetch completed, in buffer_bytes_), bounded by
  // config_.fetch_bytes in FetchRoom.
  uint64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> buffer_bytes_ ABSL_GUARDED_BY(mu_);
  // Room set aside for deferred reads in flight (their Task::reserved_bytes).
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t deferred_waiting_ ABSL_GUARDED_BY(mu_) = 0;  // deferred entries of retries_
  uint64_t fetches_deferred_ ABSL_GUARDED_BY(mu_) = 0;  // reads dropped for want of room
  // Buffers below this index keep up to kKeptFetchBufferBytes while idle.
  // Constant after construction.
  uint32_t kept_buffers_ = 0;
  uint32_t decode_inflight_ ABSL_GUARDED_BY(mu_) = 0;
  // The stage limits in force: the config's, or the tuner's choice.
  AutotuneLimits limits_ ABSL_GUARDED_BY(mu_);
  std::optional<StreamTuner> tuner_ ABSL_GUARDED_BY(mu_);  // with Config::autotune
  AutotuneClock tune_clock_ ABSL_GUARDED_BY(mu_);
  uint64_t positions_done_ ABSL_GUARDED_BY(mu_) = 0;  // samples written or failed
  uint64_t positions_at_tick_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t tasks_inflight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t consumers_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // The consumer asked for a batch (TryNext found none) and has not taken
  // one since: it waits, with a free credit.
  bool asked_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> ready_callback_ ABSL_GUARDED_BY(mu_);
  std::array<StageStats, kNumStages> stages_ ABSL_GUARDED_BY(mu_);
  std::array<StageClock, kNumStages> clocks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor
