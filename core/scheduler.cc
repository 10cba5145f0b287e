#include "core/scheduler.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/file_reader.h"
#include "core/rng.h"
#include "core/sample_transformer.h"
#include "core/sampler.h"
#include "spdlog/spdlog.h"

namespace conveyor {

namespace {
int StageIndex(Stage s) { return static_cast<int>(s); }
}  // namespace

Scheduler::Scheduler(const EngineOptions& options)
    : options_(options), created_ns_(MonotonicNanos()) {
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
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    const std::vector<std::shared_ptr<StreamState>> open = streams_;
    for (auto& s : open) {
      if (!s->terminal) Fail(s.get(), absl::UnavailableError("engine shutting down"));
    }
    work_cv_.SignalAll();
    callbacks.swap(pending_callbacks_);
  }
  for (auto& cb : callbacks) cb();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

uint64_t Scheduler::BatchesInEpoch(const StreamState& s, uint64_t epoch) const {
  const uint64_t n =
      epoch == s.options.first_epoch ? s.first_epoch_samples : s.samples_per_epoch;
  return (n + s.options.batch_size - 1) / s.options.batch_size;
}

void Scheduler::Register(const std::shared_ptr<StreamState>& s) {
  MutexLock lock(&mu_);
  s->next_epoch = s->options.first_epoch;
  s->registered = true;
  for (int i = 0; i < kNumStages; ++i) s->stages[i].name = ToString(static_cast<Stage>(i));
  if (shutdown_) {
    s->terminal = true;
    s->error = absl::UnavailableError("engine shutting down");
    s->registered = false;
    return;
  }
  streams_.push_back(s);
  ++streams_total_;
  work_cv_.SignalAll();
}

// ---------------------------------------------------------------- scheduling

void Scheduler::StartBatches(StreamState* s) {
  while (!s->terminal && !s->free_slots.empty() && !s->AllStarted()) {
    auto it = s->plans.find(s->next_epoch);
    if (it == s->plans.end()) return;  // a sample task must plan this epoch first
    const bool first = s->next_epoch == s->options.first_epoch;
    const uint64_t epoch_samples = first ? s->first_epoch_samples : s->samples_per_epoch;
    const uint64_t base_offset = first ? s->options.epoch_offset : 0;
    const uint64_t in_epoch = BatchesInEpoch(*s, s->next_epoch);
    auto b = std::make_unique<BatchWork>();
    b->sequence = s->next_sequence;
    b->epoch = s->next_epoch;
    b->batch_in_epoch = s->next_in_epoch;
    b->plan = it->second;
    b->first = s->next_in_epoch * s->options.batch_size;
    b->size = static_cast<uint32_t>(
        std::min<uint64_t>(s->options.batch_size, epoch_samples - b->first));
    b->slot = s->free_slots.back();
    s->free_slots.pop_back();
    b->failed.assign(b->size, 0);
    b->position_after = b->first + b->size;
    b->offset_after = std::min<uint64_t>(s->pipeline->dataset->size(),
                                         base_offset + b->position_after * s->options.world_size);
    b->epoch_samples = epoch_samples;
    b->end_of_epoch = s->next_in_epoch + 1 == in_epoch;
    s->open.push_back(std::move(b));
    ++s->next_sequence;
    if (++s->next_in_epoch == in_epoch) {
      s->next_in_epoch = 0;
      ++s->next_epoch;
    }
    // Plans of epochs no open batch uses any more are dropped.
    while (!s->plans.empty() && s->plans.begin()->first < s->open.front()->epoch) {
      s->plans.erase(s->plans.begin());
    }
  }
}

bool Scheduler::PickTaskFor(const std::shared_ptr<StreamState>& sp, Task* t) {
  StreamState* s = sp.get();
  if (s->terminal) return false;
  StartBatches(s);

  // Sample: plan the epoch the next batch belongs to (one epoch ahead at most).
  const bool needs_plan = !s->AllStarted() && !s->plans.count(s->next_epoch);
  if (needs_plan && !s->plan_pending) {
    s->plan_pending = true;
    t->kind = TaskKind::kSample;
    t->epoch = s->next_epoch;
    return true;
  }

  auto find_fetchable = [s]() -> BatchWork* {
    for (auto& b : s->open) {
      if (b->next_fetch < b->size) return b.get();
    }
    return nullptr;
  };
  BatchWork* fetchable = find_fetchable();
  const bool fetch_room = s->fetched.size() + s->fetch_inflight < s->fetch_capacity &&
                          !s->free_buffers.empty();
  const bool can_fetch = fetchable && fetch_room && s->fetch_inflight < s->fetch_limit;
  const bool can_decode = !s->fetched.empty() && s->decode_inflight < s->decode_limit;
  // Keep the fetched queue primed: fetch first while it is short.
  const bool prefer_fetch = can_fetch && s->fetched.size() < s->decode_limit;

  if (can_decode && !prefer_fetch) {
    FetchedSample f = s->fetched.front();
    s->fetched.pop_front();
    ++s->decode_inflight;
    t->kind = TaskKind::kDecode;
    t->batch = f.batch;
    t->position = f.position;
    t->buffer = f.buffer;
    return true;
  }
  if (can_fetch) {
    ++s->fetch_inflight;
    t->kind = TaskKind::kFetch;
    t->batch = fetchable;
    t->position = fetchable->next_fetch++;
    t->buffer = s->free_buffers.back();
    s->free_buffers.pop_back();
    return true;
  }
  return false;
}

bool Scheduler::PickTask(Task* t) {
  const size_t n = streams_.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (rr_ + k) % n;
    if (PickTaskFor(streams_[i], t)) {
      t->stream = streams_[i];
      ++t->stream->tasks_inflight;
      UpdateClocks(t->stream.get(), MonotonicNanos());
      rr_ = (i + 1) % n;  // fair: the next pick starts at the next stream
      return true;
    }
  }
  return false;
}

void Scheduler::WorkerLoop() {
  SampleTransformer transformer;
  std::vector<std::function<void()>> callbacks;
  std::vector<std::string> warnings;
  mu_.Lock();
  while (true) {
    Task t;
    while (!shutdown_ && !PickTask(&t)) work_cv_.Wait(&mu_);
    if (shutdown_ && t.stream == nullptr) break;
    mu_.Unlock();

    RunTask(&t, &transformer);

    mu_.Lock();
    BatchWork* compact = nullptr;
    Complete(&t, &compact);
    if (compact != nullptr) {
      // Collate with failures: move the surviving samples together. The batch
      // is complete, so no other task touches its slot.
      mu_.Unlock();
      const uint64_t t0 = MonotonicNanos();
      CompactBatch(t.stream.get(), compact);
      const uint64_t t1 = MonotonicNanos();
      mu_.Lock();
      t.stream->stage(Stage::kCollate).busy_ns += t1 - t0;
      compact->finalized = true;
      if (EmitInOrder(t.stream.get())) Notify(t.stream.get());
    }
    --t.stream->tasks_inflight;
    MaybeUnregister(t.stream.get());
    work_cv_.SignalAll();
    if (!pending_callbacks_.empty() || !pending_warnings_.empty()) {
      callbacks.swap(pending_callbacks_);
      warnings.swap(pending_warnings_);
      mu_.Unlock();
      for (const std::string& w : warnings) spdlog::warn("{}", w);
      for (auto& cb : callbacks) cb();
      callbacks.clear();
      warnings.clear();
      mu_.Lock();
    }
  }
  mu_.Unlock();
}

void Scheduler::RunTask(Task* t, SampleTransformer* transformer) {
  StreamState* s = t->stream.get();
  t->started_ns = MonotonicNanos();
  switch (t->kind) {
    case TaskKind::kSample: {
      const SamplerOptions so = SamplerOptionsFor(*s->pipeline, s->options, t->epoch);
      auto plan = RankIndices(so);
      if (plan.ok()) {
        t->plan = std::make_shared<const EpochPlan>(std::move(*plan));
      } else {
        t->status = plan.status();
      }
      break;
    }
    case TaskKind::kFetch: {
      // Buffers are owned by the stream; this task has exclusive use of one.
      std::vector<uint8_t>& buf = s->buffers[t->buffer];
      const uint64_t index = (*t->batch->plan)[t->batch->first + t->position];
      t->status = ReadWholeFile(s->pipeline->dataset->FullPath(index),
                                s->pipeline->max_file_bytes, &buf);
      break;
    }
    case TaskKind::kDecode: {
      BatchWork* b = t->batch;
      const std::vector<uint8_t>& buf = s->buffers[t->buffer];
      const uint64_t index = (*b->plan)[b->first + t->position];
      uint8_t* slot = s->arena->slot(b->slot);
      uint8_t* dst = slot + s->layout.images_offset + t->position * s->layout.sample_bytes;
      Rng rng = Rng::ForKeys(s->options.seed, b->epoch, index);
      t->status = transformer->Run(std::span<const uint8_t>(buf.data(), buf.size()),
                                   s->pipeline->transform, rng, dst);
      reinterpret_cast<int64_t*>(slot + s->layout.labels_offset)[t->position] =
          s->pipeline->dataset->label(index);
      reinterpret_cast<int64_t*>(slot + s->layout.indices_offset)[t->position] =
          static_cast<int64_t>(index);
      break;
    }
  }
  t->finished_ns = MonotonicNanos();
}

void Scheduler::RecordFailure(StreamState* s, BatchWork* b, uint32_t pos, const absl::Status& st) {
  const uint64_t index = (*b->plan)[b->first + pos];
  SampleFailure f;
  f.sample_index = index;
  f.path = std::string(s->pipeline->dataset->relative_path(index));
  f.reason = std::string(st.message());
  b->failed[pos] = 1;
  b->failures.emplace_back(pos, std::move(f));
}

bool Scheduler::Complete(Task* t, BatchWork** needs_compaction) {
  StreamState* s = t->stream.get();
  const uint64_t busy = t->finished_ns - t->started_ns;
  bool batch_done = false;
  BatchWork* b = t->batch;
  switch (t->kind) {
    case TaskKind::kSample: {
      StageStats& st = s->stage(Stage::kSample);
      st.busy_ns += busy;
      ++st.items_in;
      s->plan_pending = false;
      if (!t->status.ok()) {
        ++st.failures;
        Fail(s, t->status);
        break;
      }
      ++st.items_out;
      s->plans[t->epoch] = std::move(t->plan);
      break;
    }
    case TaskKind::kFetch: {
      StageStats& st = s->stage(Stage::kFetch);
      st.busy_ns += busy;
      ++st.items_in;
      --s->fetch_inflight;
      if (s->terminal) {
        s->free_buffers.push_back(t->buffer);
        break;
      }
      if (t->status.ok()) {
        ++st.items_out;
        s->fetched.push_back(FetchedSample{b, t->position, t->buffer});
      } else {
        ++st.failures;
        s->free_buffers.push_back(t->buffer);
        RecordFailure(s, b, t->position, t->status);
        batch_done = ++b->done == b->size;
      }
      break;
    }
    case TaskKind::kDecode: {
      StageStats& st = s->stage(Stage::kDecode);
      st.busy_ns += busy;
      ++st.items_in;
      --s->decode_inflight;
      s->free_buffers.push_back(t->buffer);
      if (s->terminal) break;
      if (t->status.ok()) {
        ++st.items_out;
      } else {
        ++st.failures;
        RecordFailure(s, b, t->position, t->status);
      }
      batch_done = ++b->done == b->size;
      break;
    }
  }
  if (batch_done) {
    StageStats& collate = s->stage(Stage::kCollate);
    collate.items_in += b->size;
    if (b->failures.empty()) {
      b->finalized = true;
    } else {
      *needs_compaction = b;
    }
  }
  bool news = false;
  if (batch_done && b->finalized) news = EmitInOrder(s);
  UpdateClocks(s, MonotonicNanos());
  if (news) Notify(s);
  return news;
}

void Scheduler::CompactBatch(StreamState* s, BatchWork* b) {
  uint8_t* slot = s->arena->slot(b->slot);
  const size_t bytes = s->layout.sample_bytes;
  auto* labels = reinterpret_cast<int64_t*>(slot + s->layout.labels_offset);
  auto* indices = reinterpret_cast<int64_t*>(slot + s->layout.indices_offset);
  uint32_t w = 0;
  for (uint32_t r = 0; r < b->size; ++r) {
    if (b->failed[r]) continue;
    if (w != r) {
      std::memmove(slot + s->layout.images_offset + w * bytes,
                   slot + s->layout.images_offset + r * bytes, bytes);
      labels[w] = labels[r];
      indices[w] = indices[r];
    }
    ++w;
  }
}

bool Scheduler::EmitInOrder(StreamState* s) {
  bool news = false;
  const PipelineConfig& p = *s->pipeline;
  while (!s->terminal && !s->open.empty() && s->open.front()->finalized) {
    std::unique_ptr<BatchWork> b = std::move(s->open.front());
    s->open.pop_front();
    std::sort(b->failures.begin(), b->failures.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    s->samples_seen += b->size;
    s->samples_failed += b->failures.size();
    if (!b->failures.empty()) {
      const SampleFailure& f = b->failures.front().second;
      // Logged by the worker once mu_ is released.
      pending_warnings_.push_back(absl::StrFormat(
          "pipeline %s stream %d: %d sample(s) failed in batch %d of epoch %d; first: sample %d "
          "(%s): %s",
          p.name, s->id, b->failures.size(), b->batch_in_epoch, b->epoch, f.sample_index, f.path,
          f.reason));
      if (p.error_policy == ErrorPolicy::kFailFast) {
        Fail(s, absl::DataLossError(absl::StrFormat(
                    "pipeline %s: sample %d (%s) failed: %s (error_policy fail_fast)", p.name,
                    f.sample_index, f.path, f.reason)));
        return true;
      }
      const double rate = static_cast<double>(s->samples_failed) / s->samples_seen;
      if (s->samples_seen >= p.failure_rate_min_samples && rate > p.max_failure_rate) {
        Fail(s, absl::DataLossError(absl::StrFormat(
                    "pipeline %s: %d of %d samples failed (%.1f%%), above max_failure_rate "
                    "%.1f%%; last: sample %d (%s): %s",
                    p.name, s->samples_failed, s->samples_seen, 100 * rate,
                    100 * p.max_failure_rate, f.sample_index, f.path, f.reason)));
        return true;
      }
    }
    BatchInfo info;
    info.sequence = b->sequence;
    info.epoch = b->epoch;
    info.batch_in_epoch = b->batch_in_epoch;
    info.position = b->position_after;
    info.offset = b->offset_after;
    info.epoch_samples = b->epoch_samples;
    info.slot = b->slot;
    info.num_samples = b->size - static_cast<uint32_t>(b->failures.size());
    info.end_of_epoch = b->end_of_epoch;
    info.failures.reserve(b->failures.size());
    for (auto& [pos, f] : b->failures) info.failures.push_back(std::move(f));
    s->samples_emitted += info.num_samples;
    ++s->emitted;
    StageStats& collate = s->stage(Stage::kCollate);
    ++collate.items_out;
    ++s->stage(Stage::kDeliver).items_in;
    s->ready.push_back(std::move(info));
    news = true;
  }
  return news;
}

void Scheduler::Fail(StreamState* s, absl::Status why) {
  if (s->terminal) return;
  s->terminal = true;
  s->error = std::move(why);
  // Work not yet started is dropped; tasks in flight finish and are ignored.
  s->fetched.clear();
  Notify(s);
  MaybeUnregister(s);
}

void Scheduler::Notify(StreamState* s) {
  s->ready_cv->SignalAll();
  if (s->ready_callback) pending_callbacks_.push_back(s->ready_callback);
}

void Scheduler::MaybeUnregister(StreamState* s) {
  if (!s->registered || s->tasks_inflight != 0) return;
  // A finished stream stays until its consumer took the last batch, so that
  // the totals include the delivery.
  if (!s->terminal && !(s->Finished() && s->ready.empty())) return;
  s->registered = false;
  UpdateClocks(s, MonotonicNanos());
  std::array<StageStats, kNumStages> snap;
  SnapshotStages(s, MonotonicNanos(), &snap);
  AddStages(&finished_totals_, snap);
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (streams_[i].get() == s) {
      streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
      if (rr_ > i) --rr_;
      if (rr_ >= streams_.size()) rr_ = 0;
      break;
    }
  }
}

void Scheduler::UpdateClocks(StreamState* s, uint64_t now) {
  auto set = [&](Stage st, StageClock::State state) { s->clocks[StageIndex(st)].Set(state, now); };
  bool fetchable = false;
  for (auto& b : s->open) fetchable |= b->next_fetch < b->size;
  const bool done = s->terminal || s->AllStarted();
  set(Stage::kSample, s->plan_pending ? StageClock::kActive : StageClock::kStarved);
  if (!fetchable) {
    set(Stage::kFetch, StageClock::kStarved);
  } else if (s->fetched.size() + s->fetch_inflight >= s->fetch_capacity || s->free_buffers.empty()) {
    set(Stage::kFetch, StageClock::kBlocked);
  } else {
    set(Stage::kFetch, StageClock::kActive);
  }
  set(Stage::kDecode, s->fetched.empty() && s->decode_inflight == 0 ? StageClock::kStarved
                                                                     : StageClock::kActive);
  // Collate waits for output space when no slot is free and none is being
  // filled: every slot is ready or held by the consumer (backpressure).
  if (!done && s->free_slots.empty() && (s->open.empty() || !s->ready.empty())) {
    set(Stage::kCollate, StageClock::kBlocked);
  } else if (s->open.empty()) {
    set(Stage::kCollate, StageClock::kStarved);
  } else {
    set(Stage::kCollate, StageClock::kActive);
  }
  set(Stage::kDeliver, s->ready.empty() ? StageClock::kStarved : StageClock::kActive);
}

// ---------------------------------------------------------------- consumer side

Stream::Poll Scheduler::TryNext(StreamState* s, BatchInfo* batch, absl::Status* error) {
  MutexLock lock(&mu_);
  // Batches emitted before a data failure are still delivered; after a
  // cancel or a shutdown they are not (Cancel clears them, shutdown is
  // Unavailable).
  const bool deliverable = !s->terminal || !absl::IsUnavailable(s->error);
  if (!s->ready.empty() && deliverable) {
    *batch = std::move(s->ready.front());
    s->ready.pop_front();
    s->consumer_holds[batch->slot] = 1;
    ++s->stage(Stage::kDeliver).items_out;
    UpdateClocks(s, MonotonicNanos());
    MaybeUnregister(s);
    return Stream::Poll::kBatch;
  }
  if (s->terminal) {
    *error = s->error;
    return Stream::Poll::kError;
  }
  if (s->Finished()) return Stream::Poll::kEnd;
  return Stream::Poll::kNotReady;
}

absl::StatusOr<std::optional<BatchInfo>> Scheduler::Next(StreamState* s, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    BatchInfo b;
    absl::Status err;
    switch (TryNext(s, &b, &err)) {
      case Stream::Poll::kBatch: return std::optional<BatchInfo>(std::move(b));
      case Stream::Poll::kEnd: return std::optional<BatchInfo>();
      case Stream::Poll::kError: return err;
      case Stream::Poll::kNotReady: break;
    }
    MutexLock lock(&mu_);
    if (s->ready.empty() && !s->terminal && !s->Finished()) {
      if (s->ready_cv->WaitWithDeadline(&mu_, deadline) && s->ready.empty() && !s->terminal &&
          !s->Finished()) {
        return absl::DeadlineExceededError("no batch within the timeout");
      }
    }
  }
}

absl::Status Scheduler::Release(StreamState* s, uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot >= s->consumer_holds.size() || !s->consumer_holds[slot]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slot %d is not held by this stream's consumer", slot));
  }
  s->consumer_holds[slot] = 0;
  s->free_slots.push_back(slot);
  UpdateClocks(s, MonotonicNanos());
  work_cv_.SignalAll();
  return absl::OkStatus();
}

void Scheduler::Cancel(StreamState* s, absl::Status why) {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(&mu_);
    if (s->terminal || s->Finished()) {
      s->ready_callback = nullptr;
      MaybeUnregister(s);
      return;
    }
    s->ready.clear();
    Fail(s, std::move(why));
    callbacks.swap(pending_callbacks_);
  }
  for (auto& cb : callbacks) cb();
}

void Scheduler::SetReadyCallback(StreamState* s, std::function<void()> cb) {
  MutexLock lock(&mu_);
  s->ready_callback = std::move(cb);
}

void Scheduler::AddStages(std::array<StageStats, kNumStages>* into,
                          const std::array<StageStats, kNumStages>& from) {
  for (int i = 0; i < kNumStages; ++i) {
    StageStats& a = (*into)[i];
    const StageStats& b = from[i];
    a.items_in += b.items_in;
    a.items_out += b.items_out;
    a.failures += b.failures;
    a.busy_ns += b.busy_ns;
    a.wait_input_ns += b.wait_input_ns;
    a.wait_output_ns += b.wait_output_ns;
    a.queue_size += b.queue_size;
    a.queue_capacity += b.queue_capacity;
    a.in_flight += b.in_flight;
  }
}

void Scheduler::SnapshotStages(StreamState* s, uint64_t now,
                               std::array<StageStats, kNumStages>* out) {
  *out = s->stages;
  for (int i = 0; i < kNumStages; ++i) s->clocks[i].AddTo(&(*out)[i], now);
  StageStats& fetch = (*out)[StageIndex(Stage::kFetch)];
  fetch.in_flight = s->fetch_inflight;
  StageStats& decode = (*out)[StageIndex(Stage::kDecode)];
  decode.queue_size = s->fetched.size();
  decode.queue_capacity = s->fetch_capacity;
  decode.in_flight = s->decode_inflight;
  StageStats& collate = (*out)[StageIndex(Stage::kCollate)];
  collate.queue_size = s->open.size();
  collate.queue_capacity = s->options.num_slots;
  StageStats& deliver = (*out)[StageIndex(Stage::kDeliver)];
  deliver.queue_size = s->ready.size();
  deliver.queue_capacity = s->options.num_slots;
}

StreamStats Scheduler::Stats(StreamState* s) {
  MutexLock lock(&mu_);
  const uint64_t now = MonotonicNanos();
  StreamStats st;
  st.stream_id = s->id;
  st.pipeline = s->pipeline->name;
  st.batches_emitted = s->emitted;
  st.samples_emitted = s->samples_emitted;
  st.samples_failed = s->samples_failed;
  st.slots_total = s->options.num_slots;
  for (uint8_t h : s->consumer_holds) st.slots_held_by_consumer += h;
  st.elapsed_ns = now - s->created_ns;
  SnapshotStages(s, now, &st.stages);
  return st;
}

EngineStats Scheduler::Stats() {
  std::vector<std::shared_ptr<StreamState>> open;
  EngineStats es;
  {
    MutexLock lock(&mu_);
    open = streams_;
    es.stages = finished_totals_;
    es.streams_total = streams_total_;
  }
  es.num_threads = options_.num_threads;
  es.uptime_ns = MonotonicNanos() - created_ns_;
  es.streams_open = open.size();
  for (auto& s : open) {
    es.streams.push_back(Stats(s.get()));
    AddStages(&es.stages, es.streams.back().stages);
  }
  return es;
}

}  // namespace conveyor
