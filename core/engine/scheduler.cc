#include "core/engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <ctime>

#include "core/base/status_macros.h"
#include "core/base/thread_cpu_clock.h"
#include "core/decode/media_decoder.h"

namespace conveyor {

namespace {

// CPU time of the whole process, in ns.
uint64_t ProcessCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Scheduler::Scheduler(const EngineOptions& options)
    : options_(options),
      created_ns_(MonotonicNanos()),
      cpu_budget_(options.cpu_budget),
      budget_burst_ns_(options.cpu_budget * absl::ToDoubleNanoseconds(kCpuBudgetBurst)) {
  MutexLock lock(&mu_);
  budget_ns_ = budget_burst_ns_;
  budget_at_ = created_ns_;
  if (cpu_budget_ > 0) budget_cpu_ = ProcessCpuNs();
  for (int i = 0; i < kNumStages; ++i) finished_totals_[i].name = ToString(static_cast<Stage>(i));
}

Scheduler::~Scheduler() { Shutdown(); }

void Scheduler::Start() {
  workers_.reserve(options_.num_threads);
  for (int i = 0; i < options_.num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

void Scheduler::Shutdown() {
  Outbox out;
  {
    MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    const std::vector<std::shared_ptr<StreamMachine>> open = streams_;
    for (const auto& s : open) {
      s->mu().AssertHeld();
      s->Fail(absl::UnavailableError("engine shutting down"), &out);
      MaybeUnregister(s.get(), &out);
    }
    work_cv_.SignalAll();
    budget_cv_.SignalAll();  // workers held back by the budget go on at once
  }
  out.Flush();  // cancels the parked reads: their dones come at once
  // Workers finish the tasks they run and complete the parked ones (their
  // streams then leave), and exit.
  for (auto& w : workers_) w.join();
  workers_.clear();
}

void Scheduler::Register(const std::shared_ptr<StreamMachine>& s) {
  Outbox out;
  {
    MutexLock lock(&mu_);
    s->mu().AssertHeld();
    if (shutdown_) {
      s->Fail(absl::UnavailableError("engine shutting down"), &out);
    } else {
      s->set_registered(true);
      streams_.push_back(s);
      JoinGroup(s.get());
      ++streams_total_;
      WakeOne();
    }
  }
  out.Flush();
}

// ---------------------------------------------------------------- the pool

bool Scheduler::PickTask(uint64_t now, Task* t, uint64_t* retry_at) {
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ClientGroup* g = groups_[gi].get();
    const size_t n = g->streams.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (g->rr + k) % n;
      StreamMachine* s = g->streams[i];
      s->mu().AssertHeld();
      if (!s->PickTask(now, t, retry_at)) continue;
      g->rr = (i + 1) % n;  // the group's next pick starts at its next stream
      if (g->idle) {
        // Back from idle: what it did not use while idle is not banked.
        g->idle = false;
        g->vtime = std::max(g->vtime, WakeVtime());
      }
      ++g->inflight;
      vfloor_ = std::max(vfloor_, g->vtime);
      Reorder(gi);
      return true;
    }
    // Nothing runnable and nothing running: the group is idle (groups after
    // the one picked are not looked at, but their virtual time is higher
    // than its: waking them would not change them).
    if (g->inflight == 0) g->idle = true;
  }
  return false;
}

double Scheduler::WakeVtime() const {
  double lowest = 0;
  bool any = false;
  for (const auto& g : groups_) {
    if (g->inflight > 0 && (!any || g->vtime < lowest)) {
      lowest = g->vtime;
      any = true;
    }
  }
  return any ? lowest : vfloor_;
}

void Scheduler::Reorder(size_t i) {
  while (i > 0 && groups_[i]->vtime < groups_[i - 1]->vtime) {
    std::swap(groups_[i], groups_[i - 1]);
    --i;
  }
  while (i + 1 < groups_.size() && groups_[i + 1]->vtime < groups_[i]->vtime) {
    std::swap(groups_[i], groups_[i + 1]);
    ++i;
  }
}

void Scheduler::ChargeGroup(ClientGroup* g, uint64_t cpu_ns) {
  assert(g->inflight > 0);
  --g->inflight;
  g->vtime += static_cast<double>(cpu_ns) / g->weight;
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].get() == g) {
      Reorder(i);
      return;
    }
  }
  assert(false && "a stream's group is in groups_");
}

void Scheduler::ChargeBudget(uint64_t now, uint64_t process_cpu_ns) {
  if (now > budget_at_) {
    budget_ns_ = std::min(budget_burst_ns_,
                          budget_ns_ + static_cast<double>(now - budget_at_) * cpu_budget_);
    budget_at_ = now;
  }
  if (process_cpu_ns > budget_cpu_) {
    budget_ns_ -= static_cast<double>(process_cpu_ns - budget_cpu_);
    budget_cpu_ = process_cpu_ns;
  }
}

uint64_t Scheduler::BudgetWaitUntil(uint64_t now) {
  ChargeBudget(now, 0);
  if (budget_ns_ >= 0) return 0;
  return now + static_cast<uint64_t>(std::ceil(-budget_ns_ / cpu_budget_));
}

void Scheduler::JoinGroup(StreamMachine* s) {
  s->mu().AssertHeld();
  const StreamOptions& o = s->config().plan.options;
  ClientGroup* g = nullptr;
  if (!o.client.empty()) {
    for (const auto& candidate : groups_) {
      if (candidate->key == o.client) g = candidate.get();
    }
  }
  if (g == nullptr) {
    auto made = std::make_unique<ClientGroup>();
    made->key = o.client;
    made->vtime = WakeVtime();  // a newcomer starts level with the others
    g = made.get();
    groups_.push_back(std::move(made));
    Reorder(groups_.size() - 1);
  }
  g->weight = o.weight;
  g->streams.push_back(s);
  s->set_group(g);
}

void Scheduler::LeaveGroup(StreamMachine* s) {
  s->mu().AssertHeld();
  ClientGroup* g = s->group();
  s->set_group(nullptr);
  auto it = std::find(g->streams.begin(), g->streams.end(), s);
  assert(it != g->streams.end());
  const size_t i = static_cast<size_t>(it - g->streams.begin());
  g->streams.erase(it);
  if (g->rr > i) --g->rr;
  if (g->rr >= g->streams.size()) g->rr = 0;
  if (!g->streams.empty()) return;
  assert(g->inflight == 0);
  groups_.erase(std::find_if(groups_.begin(), groups_.end(),
                             [g](const std::unique_ptr<ClientGroup>& x) { return x.get() == g; }));
}

bool Scheduler::AnyRunnable(uint64_t now, StreamMachine* hint) {
  hint->mu().AssertHeld();
  if (hint->HasRunnableTask(now)) return true;
  for (const auto& s : streams_) {
    s->mu().AssertHeld();
    if (s.get() != hint && s->HasRunnableTask(now)) return true;
  }
  return false;
}

void Scheduler::WakeOne() {
  if (idle_ > wakes_pending_) {
    ++wakes_pending_;
    work_cv_.Signal();
  }
}

void Scheduler::WorkerLoop() {
  std::unique_ptr<SampleDecoder> decoder =
      options_.decoder_factory ? options_.decoder_factory() : std::make_unique<MediaDecoder>();
  Outbox out;
  Task t;
  bool completed_pending = false;  // t ran and waits to be completed
  const bool budgeted = cpu_budget_ > 0;
  // The worker's own costs, added to sched_stats_ at its next acquisition.
  SchedulerStats mine;
  while (true) {
    // (A parked fetch finished on another thread, maybe long ago.)
    const uint64_t requested = completed_pending && !t.parked ? t.finished_ns : MonotonicNanos();
    const uint64_t process_cpu = budgeted ? ProcessCpuNs() : 0;
    mu_.Lock();
    uint64_t acquired = MonotonicNanos();
    mine.lock_wait_ns += acquired - requested;
    ++mine.lock_acquisitions;
    if (budgeted) ChargeBudget(acquired, process_cpu);

    if (completed_pending) {
      completed_pending = false;
      StreamMachine* s = t.stream;
      s->mu().AssertHeld();
      if (BatchWork* compact = s->Complete(&t, &out); compact != nullptr) {
        // Collate with failures: move the surviving samples together. The
        // batch is complete, so no other task touches its slot, and the
        // stream cannot leave while this task is counted in flight.
        const uint64_t c0 = MonotonicNanos();
        mine.lock_hold_ns += c0 - acquired;
        const bool clock = groups_.size() > 1;
        mu_.Unlock();
        const int64_t cpu0 = clock ? ThreadCpuNs() : 0;
        s->CompactBatch(*compact);
        if (clock) t.cpu_ns += static_cast<uint64_t>(ThreadCpuNs() - cpu0);
        const uint64_t c1 = MonotonicNanos();
        mu_.Lock();
        acquired = MonotonicNanos();
        mine.lock_wait_ns += acquired - c1;
        ++mine.lock_acquisitions;
        s->mu().AssertHeld();
        s->FinishCompaction(compact, c1 - c0, &out);
      }
      ChargeGroup(s->group(), t.cpu_ns);
      s->EndTask();
      MaybeUnregister(s, &out);  // s may leave: out->retired holds it
      ++mine.tasks_run;
    }
    if (!out.empty()) {
      // Consumer callbacks and warnings run without the lock.
      const uint64_t released = MonotonicNanos();
      mine.lock_hold_ns += released - acquired;
      mu_.Unlock();
      out.Flush();
      mu_.Lock();
      acquired = MonotonicNanos();
      mine.lock_wait_ns += acquired - released;
      ++mine.lock_acquisitions;
    }

    bool woken = false;
    bool finished_parked = false;
    uint64_t now = acquired;
    while (true) {
      if (budgeted && !shutdown_) {
        // Over the CPU budget: no task (not even a parked fetch to
        // complete) until the bucket has refilled. Shutdown wakes us.
        if (const uint64_t until = BudgetWaitUntil(now); until != 0) {
          const uint64_t wait_start = MonotonicNanos();
          mine.lock_hold_ns += wait_start - acquired;
          ++sched_stats_.budget_waits;
          budget_cv_.WaitUntilMonotonic(&mu_, until);
          now = acquired = MonotonicNanos();
          sched_stats_.budget_wait_ns += acquired - wait_start;
          continue;
        }
      }
      if (!completed_.empty()) {
        // A parked fetch's read is done: complete it first (it frees a
        // fetch place of its stream and feeds its decode).
        t = std::move(completed_.front());
        completed_.pop_front();
        t.cpu_ns = 0;  // its start's CPU time went unaccounted to its group
        finished_parked = true;
        break;
      }
      if (shutdown_ && parked_ == 0) {
        mine.lock_hold_ns += MonotonicNanos() - acquired;
        sched_stats_.tasks_run += mine.tasks_run;
        sched_stats_.lock_acquisitions += mine.lock_acquisitions;
        sched_stats_.lock_wait_ns += mine.lock_wait_ns;
        sched_stats_.lock_hold_ns += mine.lock_hold_ns;
        mu_.Unlock();
        return;
      }
      uint64_t retry_at = StreamMachine::kNever;
      t = Task();
      // Shutting down: only the parked fetches are left to complete.
      if (!shutdown_ && PickTask(now, &t, &retry_at)) break;
      if (woken) ++sched_stats_.idle_wakeups;
      // Nothing may run: sleep until someone makes work runnable, or until
      // the earliest retry when no other worker waits for an earlier one.
      mine.lock_hold_ns += MonotonicNanos() - acquired;
      ++idle_;
      if (retry_at < timer_at_) {
        timer_at_ = retry_at;
        work_cv_.WaitUntilMonotonic(&mu_, retry_at);
        if (timer_at_ == retry_at) timer_at_ = StreamMachine::kNever;
      } else {
        work_cv_.Wait(&mu_);
      }
      --idle_;
      if (wakes_pending_ > 0) --wakes_pending_;
      ++sched_stats_.wakeups;
      woken = true;
      now = acquired = MonotonicNanos();
    }
    if (finished_parked) {
      // Completed at the top of the loop, as a task this worker ran.
      mine.lock_hold_ns += MonotonicNanos() - acquired;
      mu_.Unlock();
      completed_pending = true;
      continue;
    }
    // More work than this worker and someone asleep: pass the baton.
    if (idle_ > wakes_pending_ && (!completed_.empty() || AnyRunnable(now, t.stream))) WakeOne();
    std::shared_ptr<StreamMachine> parked_stream;
    if (t.kind == TaskKind::kFetch && t.stream->fetches_asynchronously()) {
      // A network read: started here, completed by whoever takes it from
      // completed_ once its bytes are there. This worker goes on at once.
      t.stream->mu().AssertHeld();
      t.stream->Park(&t);
      ++parked_;
      parked_stream = t.stream->shared_from_this();
    }
    sched_stats_.tasks_run += mine.tasks_run;
    sched_stats_.lock_acquisitions += mine.lock_acquisitions;
    sched_stats_.lock_wait_ns += mine.lock_wait_ns;
    sched_stats_.lock_hold_ns += mine.lock_hold_ns;
    mine = SchedulerStats();
    // A task's CPU time matters only when groups contend: a lone client
    // (the common case) pays no clock reads.
    const bool clock = groups_.size() > 1;
    mu_.Unlock();

    if (parked_stream != nullptr) {
      const uint64_t start = MonotonicNanos();
      mine.lock_hold_ns += start - acquired;
      StreamMachine* s = parked_stream.get();
      s->RunFetchAsync(std::move(t), std::move(parked_stream));
      continue;  // (counted in tasks_run once completed)
    }
    // The hold ends where the task starts, or before the clock read (a
    // syscall, not the lock's cost) when there is one.
    const uint64_t released = clock ? MonotonicNanos() : 0;
    const int64_t cpu0 = clock ? ThreadCpuNs() : 0;
    t.stream->RunTask(&t, decoder.get());  // sets started_ns first thing
    t.cpu_ns = clock ? static_cast<uint64_t>(ThreadCpuNs() - cpu0) : 0;
    mine.lock_hold_ns += (clock ? released : t.started_ns) - acquired;
    completed_pending = true;
  }
}

void Scheduler::FetchDone(Task t) {
  std::shared_ptr<PendingRead> read;  // dropped after the lock is released
  MutexLock lock(&mu_);
  t.stream->mu().AssertHeld();
  read = t.stream->Unpark(t.buffer);
  completed_.push_back(std::move(t));
  --parked_;
  if (shutdown_) {
    work_cv_.SignalAll();  // workers wait for the last parked fetch to exit
  } else {
    WakeOne();
  }
}

void Scheduler::MaybeUnregister(StreamMachine* s, Outbox* out) {
  s->mu().AssertHeld();
  if (s->registered() && s->CanLeave()) {
    s->set_registered(false);
    const uint64_t now = MonotonicNanos();
    s->UpdateClocks(now);
    std::array<StageStats, kNumStages> snap;
    s->SnapshotStages(now, &snap);
    // Queue fill and tasks in flight are gauges of what is open now: a
    // finished stream's counters stay in the totals, its queues do not.
    for (StageStats& st : snap) st.queue_size = st.queue_capacity = st.in_flight = 0;
    AddStages(&finished_totals_, snap);
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i].get() == s) {
        LeaveGroup(s);
        out->retired.push_back(std::move(streams_[i]));
        streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
    assert(false && "a registered stream is in streams_");
    return;
  }
  // A registered stream is one that can still run or whose consumer lives:
  // every transition that can let it leave ends here.
  assert(!s->registered() || !s->CanLeave());
  assert(!s->registered() || !s->consumer_gone() || s->tasks_inflight() > 0);
}

// ---------------------------------------------------------------- consumer side

Stream::Poll Scheduler::TryNext(StreamMachine* s, BatchInfo* batch, absl::Status* error) {
  Outbox out;  // the caller's handle keeps s alive: nothing to retire late
  MutexLock lock(&mu_);
  s->mu().AssertHeld();
  const Stream::Poll p = s->TryNext(batch, error);
  if (p == Stream::Poll::kBatch) MaybeUnregister(s, &out);  // the last batch may have gone
  return p;
}

absl::StatusOr<std::optional<BatchInfo>> Scheduler::Next(StreamMachine* s, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  Outbox out;  // the caller's handle keeps s alive: nothing to retire late
  MutexLock lock(&mu_);
  s->mu().AssertHeld();
  while (true) {
    BatchInfo b;
    absl::Status err;
    switch (s->TryNext(&b, &err)) {
      case Stream::Poll::kBatch:
        MaybeUnregister(s, &out);
        return std::optional<BatchInfo>(std::move(b));
      case Stream::Poll::kEnd: return std::optional<BatchInfo>();
      case Stream::Poll::kError: return err;
      case Stream::Poll::kNotReady: break;
    }
    if (!s->WaitForNews(deadline))
      return absl::DeadlineExceededError("no batch within the timeout");
  }
}

absl::Status Scheduler::Release(StreamMachine* s, uint32_t slot) {
  MutexLock lock(&mu_);
  s->mu().AssertHeld();
  RETURN_IF_ERROR(s->Release(slot));
  // A free slot may let the stream start a batch: one worker is enough to
  // begin it (it passes the baton if there is more).
  if (idle_ > wakes_pending_ && s->registered() && s->HasRunnableTask(MonotonicNanos())) {
    WakeOne();
  }
  return absl::OkStatus();
}

void Scheduler::Cancel(StreamMachine* s, absl::Status why) {
  Outbox out;
  {
    MutexLock lock(&mu_);
    s->mu().AssertHeld();
    s->Cancel(std::move(why), /*consumer_gone=*/false, &out);
    MaybeUnregister(s, &out);
  }
  out.Flush();
}

void Scheduler::Close(StreamMachine* s) {
  Outbox out;
  {
    MutexLock lock(&mu_);
    s->mu().AssertHeld();
    s->Cancel(absl::CancelledError("stream closed"), /*consumer_gone=*/true, &out);
    MaybeUnregister(s, &out);
  }
  out.Flush();  // no consumer callback any more; warnings only
}

void Scheduler::FinishDone(StreamMachine* s, uint64_t sequence, absl::Status status) {
  Outbox out;
  {
    MutexLock lock(&mu_);
    s->mu().AssertHeld();
    s->FinishDone(sequence, std::move(status), &out);
    MaybeUnregister(s, &out);  // a failed finish ends the stream
  }
  out.Flush();
}

void Scheduler::SetReadyCallback(StreamMachine* s, std::function<void()> cb) {
  MutexLock lock(&mu_);
  s->mu().AssertHeld();
  s->SetReadyCallback(std::move(cb));
}

// ---------------------------------------------------------------- statistics

StreamStats Scheduler::Stats(StreamMachine* s) {
  MutexLock lock(&mu_);
  s->mu().AssertHeld();
  return s->Stats(MonotonicNanos());
}

EngineStats Scheduler::Stats() {
  EngineStats es;
  es.num_threads = options_.num_threads;
  std::vector<std::shared_ptr<StreamMachine>> open;
  {
    MutexLock lock(&mu_);
    open = streams_;
    es.stages = finished_totals_;
    es.streams_total = streams_total_;
  }
  es.uptime_ns = MonotonicNanos() - created_ns_;
  es.streams_open = open.size();
  es.streams.reserve(open.size());
  // One short critical section per stream, so a stats poll never holds
  // the workers up for the whole list.
  for (const auto& s : open) {
    es.streams.push_back(Stats(s.get()));
    AddStages(&es.stages, es.streams.back().stages);
  }
  return es;
}

SchedulerStats Scheduler::scheduler_stats() {
  MutexLock lock(&mu_);
  return sched_stats_;
}

}  // namespace conveyor
