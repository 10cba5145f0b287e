// StreamMachine: construction, the pick / run / complete steps of the
// sample, fetch and decode stages, and statistics. Collate is in
// core/engine/collate.cc, the consumer side in core/engine/deliver.cc.
#include "core/engine/stream_machine.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/base/task_cancel.h"
#include "core/data/list_columns.h"
#include "core/data/npy_array.h"
#include "core/data/sampler.h"
#include "spdlog/spdlog.h"

namespace conveyor {

namespace {
int StageIndex(Stage s) { return static_cast<int>(s); }

// A fetch buffer larger than this after its sample is decoded is freed
// instead of kept for the next sample (most samples are far smaller).
constexpr size_t kKeptFetchBufferBytes = 1u << 20;

// How many samples past the one being fetched are announced to the source
// (SampleSource::Prefetch): enough to keep a network source's requests in
// flight at thousands of samples/s with tens of ms per request; the
// source's own read-ahead budget bounds the memory.
constexpr size_t kPrefetchLookahead = 256;

const SampleSource* ChooseSource(const PipelineConfig& p,
                                 const std::unique_ptr<SampleSource>& fallback) {
  return p.source != nullptr ? p.source.get() : fallback.get();
}

// The stream's output cache: the pipeline's, unless its source reads over
// the network (no cheap identity) or the stream's transform draws random
// numbers (ValidatePipelineConfig refuses such a pipeline already).
OutputCache* ChooseCache(const PipelineConfig& p, const TransformSpec& transform,
                         const SampleSource* source) {
  if (p.output_cache == nullptr || source->reads_asynchronously()) return nullptr;
  if (RandomDraws(transform) != nullptr) return nullptr;
  return p.output_cache.get();
}
}  // namespace

void Outbox::Flush() {
  for (const std::string& w : warnings) spdlog::warn("{}", w);
  for (const std::string& line : debug_lines) spdlog::debug("{}", line);
  for (PendingFinish& f : finishes) f.stream->StartFinish(f.batch);
  for (auto& cb : callbacks) cb();
  warnings.clear();
  debug_lines.clear();
  finishes.clear();  // may let go of the last reference of a stream: no lock is held
  callbacks.clear();
  retired.clear();
}

uint64_t RetryPolicy::BackoffNs(uint32_t attempt) const {
  uint64_t b = initial_backoff_ns;
  for (uint32_t i = 1; i < attempt && b < max_backoff_ns; ++i) {
    b = b > max_backoff_ns / 2 ? max_backoff_ns : 2 * b;
  }
  return std::min(b, max_backoff_ns);
}

StreamMachine::StreamMachine(Config config, std::unique_ptr<SlotArena> arena, Mutex* mu)
    : config_(std::move(config)),
      arena_(std::move(arena)),
      source_(nullptr),
      default_source_(config_.pipeline->source != nullptr
                          ? nullptr
                          : std::make_unique<FileSampleSource>(config_.pipeline->dataset,
                                                               config_.pipeline->max_file_bytes,
                                                               config_.file_reader)),
      created_ns_(MonotonicNanos()),
      cache_(ChooseCache(*config_.pipeline, config_.plan.transform,
                         ChooseSource(*config_.pipeline, default_source_))),
      transform_key_(cache_ != nullptr ? TransformFingerprint(config_.plan.transform) : ""),
      mu_(*mu) {
  source_ = ChooseSource(*config_.pipeline, default_source_);
  // Fetch buffers: one per queued sample, plus one per decode in flight (at
  // the most the tuner may choose).
  const AutotuneLimits start{config_.fetch_limit, config_.decode_limit, config_.fetch_capacity};
  const AutotuneLimits& most = config_.autotune ? config_.autotune_max : start;
  const uint32_t num_buffers = most.fetch_queue_capacity + most.decode_concurrency;
  kept_buffers_ = start.fetch_queue_capacity + start.decode_concurrency;
  buffers_.resize(num_buffers);
  if (cache_ != nullptr) cache_keys_.resize(num_buffers);
  // Not yet shared with any other thread; the lock is taken for the analysis.
  MutexLock lock(&mu_);
  limits_ = start;
  if (config_.autotune) {
    tuner_.emplace(config_.autotune_options, start, config_.autotune_max);
    tune_clock_.Start(created_ns_);
  }
  buffer_bytes_.assign(num_buffers, 0);
  parked_.resize(num_buffers);
  free_buffers_.reserve(num_buffers);
  for (uint32_t i = num_buffers; i > 0; --i) free_buffers_.push_back(i - 1);
  // Slots are handed out lowest first.
  const uint32_t n = config_.plan.options.num_slots;
  free_slots_.reserve(n);
  for (uint32_t i = n; i > 0; --i) free_slots_.push_back(i - 1);
  consumer_holds_.assign(n, 0);
  next_epoch_ = config_.plan.options.first_epoch;
  for (int i = 0; i < kNumStages; ++i) stages_[i].name = ToString(static_cast<Stage>(i));
}

uint64_t StreamMachine::BatchesInEpoch(uint64_t epoch) const {
  const StreamPlan& plan = config_.plan;
  return epoch == plan.options.first_epoch ? plan.first_epoch_batches : plan.batches_per_epoch;
}

bool StreamMachine::CanLeave() const {
  if (tasks_inflight_ != 0) return false;
  if (terminal_) return true;
  // A finished stream stays until its consumer took the last batch (so the
  // engine's totals include the delivery), or left without it.
  return Finished() && (ready_.empty() || consumer_gone_);
}

// ---------------------------------------------------------------- picking

void StreamMachine::StartBatches() {
  const StreamOptions& o = config_.plan.options;
  while (!terminal_ && !free_slots_.empty() && !AllStarted()) {
    auto it = plans_.find(next_epoch_);
    if (it == plans_.end()) return;  // a sample task must plan this epoch first
    const bool first = next_epoch_ == o.first_epoch;
    const uint64_t epoch_samples =
        first ? config_.plan.first_epoch_samples : config_.plan.samples_per_epoch;
    const uint64_t base_offset = first ? o.epoch_offset : 0;
    const uint64_t in_epoch = BatchesInEpoch(next_epoch_);
    auto b = std::make_unique<BatchWork>();
    b->sequence = next_sequence_;
    b->epoch = next_epoch_;
    b->batch_in_epoch = next_in_epoch_;
    b->plan = it->second;
    b->first = next_in_epoch_ * o.batch_size;  // < epoch_samples: no overflow
    b->size = static_cast<uint32_t>(std::min<uint64_t>(o.batch_size, epoch_samples - b->first));
    b->slot = free_slots_.back();
    free_slots_.pop_back();
    b->failed.assign(b->size, 0);
    b->position_after = b->first + b->size;
    // position_after ≤ ceil((N - offset) / W), so base_offset + position_after × W < N + W.
    b->offset_after = std::min<uint64_t>(config_.pipeline->dataset->size(),
                                         base_offset + b->position_after * o.world_size);
    b->epoch_samples = epoch_samples;
    b->end_of_epoch = next_in_epoch_ + 1 == in_epoch;
    open_.push_back(std::move(b));
    ++next_sequence_;
    if (++next_in_epoch_ == in_epoch) {
      next_in_epoch_ = 0;
      ++next_epoch_;  // PlanStream: the stream's epochs fit uint64
    }
    // Plans of epochs no open batch uses any more are dropped.
    while (!plans_.empty() && plans_.begin()->first < open_.front()->epoch) {
      plans_.erase(plans_.begin());
    }
  }
}

bool StreamMachine::HasEpoch(uint64_t epoch) const {
  const StreamOptions& o = config_.plan.options;
  return epoch != kNever && epoch >= o.first_epoch &&
         (o.num_epochs == 0 || epoch - o.first_epoch < o.num_epochs);
}

uint64_t StreamMachine::EpochToPlan() const {
  if (AllStarted()) return kNever;
  if (!plans_.count(next_epoch_)) return next_epoch_;
  // The next epoch's order is a pure function of (seed, epoch): plan it
  // while this one's last samples start, so the fetches near the boundary
  // can announce it (AnnounceAfter) and its first samples arrive warm. At most
  // two plans are held; resume is unaffected (nothing but hints use it).
  const uint64_t after = next_epoch_ + 1;
  if (next_epoch_ == kNever || !HasEpoch(after) || plans_.count(after)) return kNever;
  const uint64_t samples = next_epoch_ == config_.plan.options.first_epoch
                               ? config_.plan.first_epoch_samples
                               : config_.plan.samples_per_epoch;
  const uint64_t started = next_in_epoch_ * config_.plan.options.batch_size;
  return started + kPrefetchLookahead >= samples ? after : kNever;
}

bool StreamMachine::CanSample() const { return !plan_pending_ && EpochToPlan() != kNever; }

bool StreamMachine::FetchRoom() const {
  return fetched_.size() + fetch_inflight_ < limits_.fetch_queue_capacity &&
         !free_buffers_.empty() && fetch_inflight_ < limits_.fetch_concurrency &&
         ChargedBytes() < config_.fetch_bytes;
}

BatchWork* StreamMachine::Fetchable() const {
  // A deferred read goes before any new sample (see the header).
  if (deferred_waiting_ != 0) return nullptr;
  for (const auto& b : open_) {
    if (b->next_fetch < b->size) return b.get();
  }
  return nullptr;
}

int StreamMachine::DueRetry(uint64_t now, uint64_t* retry_at) const {
  for (size_t i = 0; i < retries_.size(); ++i) {
    const PendingRetry& r = retries_[i];
    if (r.deferred ? DeferredFits(r) : r.not_before_ns <= now) return static_cast<int>(i);
  }
  // A deferred read waits for room, which a completion makes: no time.
  for (const PendingRetry& r : retries_) {
    if (!r.deferred) *retry_at = std::min(*retry_at, r.not_before_ns);
  }
  return -1;
}

bool StreamMachine::CanDecode() const {
  return !fetched_.empty() && decode_inflight_ < limits_.decode_concurrency;
}

bool StreamMachine::HasRunnableTask(uint64_t now) {
  if (terminal_) return false;
  StartBatches();
  if (CanSample() || CanDecode()) return true;
  if (!FetchRoom()) return false;
  uint64_t ignored = kNever;
  return Fetchable() != nullptr || DueRetry(now, &ignored) >= 0;
}

bool StreamMachine::PickTask(uint64_t now, Task* t, uint64_t* retry_at) {
  if (terminal_) return false;
  StartBatches();
  if (CanSample()) {
    TakeSample(t);
  } else {
    const bool room = FetchRoom();
    const bool can_fetch =
        room && (Fetchable() != nullptr || (!retries_.empty() && DueRetry(now, retry_at) >= 0));
    // Keep the fetched queue primed: fetch first while it is short.
    const bool prefer_fetch = can_fetch && fetched_.size() < limits_.decode_concurrency;
    if (CanDecode() && !prefer_fetch) {
      TakeDecode(t);
    } else if (can_fetch) {
      TakeFetch(now, t, retry_at);
    } else {
      return false;
    }
  }
  t->stream = this;
  ++tasks_inflight_;
  UpdateClocks(now);
  return true;
}

BatchWork* StreamMachine::Complete(Task* t, Outbox* out) {
  BatchWork* compact = nullptr;
  switch (t->kind) {
    case TaskKind::kSample: CompleteSample(t, out); break;
    case TaskKind::kFetch: compact = CompleteFetch(t, out); break;
    case TaskKind::kDecode: compact = CompleteDecode(t, out); break;
  }
  UpdateClocks(t->finished_ns);
  if (tuner_.has_value()) MaybeTune(t->finished_ns, out);
  CheckInvariants();
  return compact;
}

void StreamMachine::RunTask(Task* t, SampleDecoder* decoder) const {
  t->started_ns = MonotonicNanos();
  switch (t->kind) {
    case TaskKind::kSample: RunSample(t); break;
    case TaskKind::kFetch: RunFetch(t); break;
    case TaskKind::kDecode: RunDecode(t, decoder); break;
  }
  t->finished_ns = MonotonicNanos();
}

// ---------------------------------------------------------------- sample

void StreamMachine::TakeSample(Task* t) {
  plan_pending_ = true;
  t->kind = TaskKind::kSample;
  t->epoch = EpochToPlan();
}

void StreamMachine::RunSample(Task* t) const {
  auto plan = PlanRank(SamplerOptionsFor(*config_.pipeline, config_.plan.options, t->epoch));
  if (plan.ok()) {
    t->plan = std::make_shared<const EpochPlan>(std::move(*plan));
  } else {
    t->status = plan.status();
  }
}

void StreamMachine::CompleteSample(Task* t, Outbox* out) {
  StageStats& st = stage(Stage::kSample);
  st.busy_ns += t->finished_ns - t->started_ns;
  ++st.items_in;
  plan_pending_ = false;
  if (!t->status.ok()) {
    CountFailure(&st, t->status);
    Fail(t->status, out);
    return;
  }
  ++st.items_out;
  plans_[t->epoch] = std::move(t->plan);
}

// ---------------------------------------------------------------- fetch

void StreamMachine::TakeFetch(uint64_t now, Task* t, uint64_t* retry_at) {
  t->kind = TaskKind::kFetch;
  t->buffer = free_buffers_.back();
  free_buffers_.pop_back();
  ++fetch_inflight_;
  // A due retry goes first: its batch is the oldest unfinished one.
  if (const int i = retries_.empty() ? -1 : DueRetry(now, retry_at); i >= 0) {
    const PendingRetry r = retries_[static_cast<size_t>(i)];
    retries_[static_cast<size_t>(i)] = retries_.back();
    retries_.pop_back();
    t->batch = r.batch;
    t->position = r.position;
    t->attempt = r.attempt;
    t->first_failure_ns = r.first_failure_ns;
    t->reserved_bytes = 0;
    if (r.deferred) {
      --deferred_waiting_;
      t->reserved_bytes = r.needs_bytes;
      reserved_bytes_ += r.needs_bytes;
    }
    return;
  }
  BatchWork* b = Fetchable();
  t->batch = b;
  t->position = b->next_fetch++;
  t->attempt = 0;
  t->first_failure_ns = 0;
  t->reserved_bytes = 0;
  AnnounceAfter(*b, t->position);
}

void StreamMachine::AnnounceAfter(const BatchWork& b, uint32_t position) const {
  // The samples after this one in the stream's order: a network source
  // starts them now. Announced under the lock, before any later position is
  // taken, so no hint ever names a sample whose read already began (it
  // would be requested again and its bytes kept for nobody). Retries are
  // behind the window: they announce nothing.
  // Plans hold 4-byte indices (RankPlan): the window is copied out wide.
  std::array<uint64_t, kPrefetchLookahead> upcoming;
  const EpochPlan& plan = *b.plan;
  const size_t next = b.first + position + 1;
  const bool every_sample = config_.plan.options.world_size == 1;
  size_t announced = 0;
  if (next < plan.size()) {
    announced = std::min(kPrefetchLookahead, plan.size() - next);
    plan.CopyTo(next, std::span<uint64_t>(upcoming.data(), announced));
    source_->Prefetch(std::span<const uint64_t>(upcoming.data(), announced), every_sample);
  }
  // ... and on into the stream's next epoch once it is planned
  // (EpochToPlan), so that epoch starts warm.
  if (announced < kPrefetchLookahead && HasEpoch(b.epoch + 1)) {
    if (auto it = plans_.find(b.epoch + 1); it != plans_.end()) {
      const EpochPlan& after = *it->second;
      const size_t more = std::min(kPrefetchLookahead - announced, after.size());
      after.CopyTo(0, std::span<uint64_t>(upcoming.data(), more));
      source_->Prefetch(std::span<const uint64_t>(upcoming.data(), more), every_sample);
    }
  }
}

void StreamMachine::RunFetch(Task* t) const {
  // This task has exclusive use of its buffer (and its cache key).
  const uint64_t index = t->batch->sample_index(t->position);
  if (cache_ != nullptr && ServeFromCache(t, index)) return;
  t->status = source_->Read(index, &buffers_[t->buffer]);
}

bool StreamMachine::ServeFromCache(Task* t, uint64_t index) const {
  std::string& key = cache_keys_[t->buffer];
  key.clear();
  if (!source_->Identity(index, &key)) {
    key.clear();  // not cached: the decode writes straight into the slot
    return false;
  }
  key.append(transform_key_);
  t->cache_lookup = true;
  const OutputCache::Bytes hit = cache_->Lookup(key);
  const BatchLayout& l = config_.plan.layout;
  // The key fixes the transform, so the size matches; checked all the same.
  if (hit == nullptr || hit->size() != l.sample_bytes) return false;
  key.clear();
  uint8_t* slot = arena_->slot(t->batch->slot);
  std::memcpy(slot + l.images_offset + t->position * l.sample_bytes, hit->data(), l.sample_bytes);
  WriteLabelAndIndex(slot, t->position, index);
  t->cache_hit = true;
  return true;
}

void StreamMachine::WriteLabelAndIndex(uint8_t* slot, uint32_t position, uint64_t index) const {
  const BatchLayout& l = config_.plan.layout;
  reinterpret_cast<int64_t*>(slot + l.labels_offset)[position] =
      config_.pipeline->dataset->label(index);
  reinterpret_cast<int64_t*>(slot + l.indices_offset)[position] = static_cast<int64_t>(index);
}

absl::Status StreamMachine::WriteFields(uint8_t* slot, uint32_t position, uint64_t index,
                                        std::span<const uint8_t> read,
                                        SampleDecoder* decoder) const {
  const SampleGeometry* geometry = decoder->LastGeometry();
  const PipelineConfig& p = *config_.pipeline;
  const BatchLayout& l = config_.plan.layout;
  // A worker's scratch: no allocation per sample once warm.
  thread_local std::string key;
  thread_local std::vector<double> boxes;
  thread_local std::vector<float> moved;
  thread_local std::vector<uint8_t> rewritten;
  for (size_t f = 0; f < p.fields.size(); ++f) {
    const SampleFieldSpec& spec = p.fields[f];
    const BatchLayout::FieldArea& area = l.fields[f];
    std::optional<std::span<const uint8_t>> value;
    if (spec.type == FieldType::kKey) {
      p.parts->Key(index, &key);
      value = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size());
    } else if (spec.type == FieldType::kAugment) {
      if (decoder->LastDraws(&key)) {
        value = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(key.data()), key.size());
      }
    } else {
      value = p.parts->Member(index, spec.member, read);
    }
    uint32_t length = 0;
    if (value.has_value()) {
      NpyArray npy;
      RETURN_IF_ERROR(CheckFieldValue(spec, *value, &npy));
      if (spec.type == FieldType::kMask) {
        // Decoded straight into its place, through the image's geometry.
        if (geometry == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "field '", spec.name, "': this sample's decoder reports no geometry for its mask"));
        }
        absl::Status st =
            decoder->RunMask(*value, config_.plan.transform, *geometry,
                             slot + area.data_offset + size_t{position} * area.stride);
        if (!st.ok()) {
          return absl::Status(st.code(), absl::StrCat("field '", spec.name, "': ", st.message()));
        }
        const uint32_t length = area.stride;
        std::memcpy(slot + area.offsets_offset + sizeof(uint32_t) * (size_t{position} + 1), &length,
                    sizeof(length));
        slot[area.present_offset + position] = 1;
        continue;
      }
      if (spec.geometry != FieldGeometry::kNone) {
        // Boxes and keypoints move with the image: rewritten as float32 [M, columns].
        if (geometry == nullptr) {
          return absl::InvalidArgumentError(absl::StrCat(
              "field '", spec.name, "': this sample's decoder reports no geometry for its boxes"));
        }
        size_t columns = 4;
        ReadBoxes(npy, &boxes, &columns);
        if (spec.geometry == FieldGeometry::kKeypoints) {
          TransformKeypoints(*geometry, spec.normalized, boxes, columns, &moved);
        } else {
          TransformBoxes(
              *geometry,
              spec.geometry == FieldGeometry::kBoxesXywh ? BoxFormat::kXywh : BoxFormat::kXyxy,
              spec.normalized, boxes, columns, &moved);
        }
        WriteNpyFloat32(moved, static_cast<int64_t>(moved.size() / columns),
                        static_cast<int64_t>(columns), &rewritten);
        if (rewritten.size() > spec.max_bytes) {
          return absl::InvalidArgumentError(absl::StrCat("field '", spec.name,
                                                         "': ", rewritten.size(),
                                                         " bytes after moving its values, more "
                                                         "than its max_bytes ",
                                                         spec.max_bytes));
        }
        value = std::span<const uint8_t>(rewritten);
      }
      length = static_cast<uint32_t>(value->size());
      if (length != 0) {
        std::memcpy(slot + area.data_offset + size_t{position} * area.stride, value->data(),
                    length);
      }
    } else if (spec.required) {
      if (std::optional<uint32_t> column = ColumnOfMember(spec.member); column.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field '", spec.name, "': the line has no column ", *column, " (a required field)"));
      }
      if (spec.type == FieldType::kAugment) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field '", spec.name, "': this sample's decoder does not report its draws"));
      }
      return absl::InvalidArgumentError(absl::StrCat("field '", spec.name,
                                                     "': the sample has no '.", spec.member,
                                                     "' member (a required field)"));
    }
    std::memcpy(slot + area.offsets_offset + sizeof(uint32_t) * (size_t{position} + 1), &length,
                sizeof(length));
    slot[area.present_offset + position] = value.has_value() ? 1 : 0;
  }
  return absl::OkStatus();
}

void StreamMachine::Park(Task* t) {
  t->parked = true;
  Parked& p = parked_[t->buffer];
  p.active = true;
  p.started_ns = MonotonicNanos();
  p.index = t->batch->sample_index(t->position);
  p.read = nullptr;
  p.serial = t->park_serial = ++park_serials_;
  ++parked_count_;
}

void StreamMachine::RunFetchAsync(Task t, std::shared_ptr<StreamMachine> self) {
  t.started_ns = MonotonicNanos();
  const uint32_t buffer = t.buffer;
  const uint64_t serial = t.park_serial;
  const uint64_t index = t.batch->sample_index(t.position);
  // The task travels with the read; the machine lives until it is
  // completed (it stays in flight), so `this` is valid in done.
  std::shared_ptr<PendingRead> read = source_->ReadAsync(
      index, &buffers_[buffer], [this, task = std::move(t)](absl::Status st) mutable {
        task.status = std::move(st);
        task.finished_ns = MonotonicNanos();
        config_.fetch_done(std::move(task));
      });
  if (read == nullptr) return;  // done ran already
  bool cancel = false;
  {
    MutexLock lock(&mu_);
    Parked& p = parked_[buffer];
    // Still this read's (the buffer was not completed and reused since)?
    if (p.active && p.serial == serial) {
      p.read = read;
      // A Fail between Park and now found no handle to cancel.
      cancel = terminal_;
    }
  }
  if (cancel) read->Cancel();
  // `read` and `self` are dropped here, without the lock.
}

std::shared_ptr<PendingRead> StreamMachine::Unpark(uint32_t buffer) {
  Parked& p = parked_[buffer];
  assert(p.active);
  p.active = false;
  --parked_count_;
  return std::move(p.read);
}

void StreamMachine::CancelParked(Outbox* out) {
  if (parked_count_ == 0) return;
  for (const Parked& p : parked_) {
    if (!p.active || p.read == nullptr) continue;
    // The pipeline holds the source, which holds the reader the handle
    // points into: kept alive until the call is made.
    out->callbacks.push_back([read = p.read, pipeline = config_.pipeline] { read->Cancel(); });
  }
}

BatchWork* StreamMachine::CompleteFetch(Task* t, Outbox* out) {
  StageStats& st = stage(Stage::kFetch);
  st.busy_ns += t->finished_ns - t->started_ns;
  ++st.items_in;
  --fetch_inflight_;
  reserved_bytes_ -= t->reserved_bytes;
  if (t->cache_lookup) ++(t->cache_hit ? cache_hits_ : cache_misses_);
  if (terminal_) {
    free_buffers_.push_back(t->buffer);
    return nullptr;
  }
  if (t->cache_hit) {
    // Written from the output cache: the position is done, nothing to decode.
    ++st.items_out;
    free_buffers_.push_back(t->buffer);
    return PositionDone(t->batch, out);
  }
  if (t->status.ok()) {
    // The fetch task is done with the buffer: its size is stable.
    const uint64_t size = buffers_[t->buffer].size();
    const uint64_t charged = ChargedBytes();
    if (!t->parked && size != 0 && charged != 0 && charged + size > config_.fetch_bytes) {
      // No room for it: read again once there is (see the header).
      if (cache_ != nullptr) cache_keys_[t->buffer].clear();
      DropFetchedBytes(t->buffer, out);
      retries_.push_back(PendingRetry{t->batch, t->position, t->attempt, 0, t->first_failure_ns,
                                      size, /*deferred=*/true});
      ++deferred_waiting_;
      ++fetches_deferred_;
      return nullptr;
    }
    ++st.items_out;
    buffer_bytes_[t->buffer] = size;
    held_bytes_ += buffer_bytes_[t->buffer];
    fetched_.push_back(Fetched{t->batch, t->position, t->buffer});
    return nullptr;
  }
  free_buffers_.push_back(t->buffer);
  CountFailure(&st, t->status);
  if (!IsSystemError(t->status)) {
    RecordFailure(t->batch, t->position, t->status);
    return PositionDone(t->batch, out);
  }
  // An error of the system: not this sample's fault. Try again later, or
  // give the stream up with a retryable status; never a gap in the batch.
  const uint64_t now = t->finished_ns;
  const uint32_t failures = t->attempt + 1;
  const uint64_t first = t->first_failure_ns != 0 ? t->first_failure_ns : now;
  const RetryPolicy& rp = config_.retry;
  if (failures >= rp.max_attempts || now - first >= rp.deadline_ns) {
    const uint64_t index = t->batch->sample_index(t->position);
    Fail(absl::UnavailableError(absl::StrFormat(
             "pipeline %s stream %d: sample %d (%s) could not be read after %d attempt(s) over "
             "%d ms: %s (an error of the system, not of the sample: retry the stream)",
             config_.pipeline->name, config_.id, index,
             config_.pipeline->dataset->relative_path(index), failures, (now - first) / 1000000,
             t->status.message())),
         out);
    return nullptr;
  }
  const uint64_t backoff = std::min(rp.BackoffNs(failures), kNever - 1 - now);
  retries_.push_back(PendingRetry{t->batch, t->position, failures, now + backoff, first});
  return nullptr;
}

size_t StreamMachine::KeptCapacity(uint32_t buffer) const {
  return buffer < kept_buffers_ ? kKeptFetchBufferBytes : 0;
}

void StreamMachine::DropFetchedBytes(uint32_t buffer, Outbox* out) {
  std::vector<uint8_t>& buf = buffers_[buffer];
  if (buf.capacity() > KeptCapacity(buffer)) {
    // Freed with the outbox's callbacks, once the lock is released.
    out->callbacks.push_back([dropped = std::make_shared<std::vector<uint8_t>>(std::move(buf))] {});
    buf = std::vector<uint8_t>();
  } else {
    buf.clear();
  }
  free_buffers_.push_back(buffer);
}

// ---------------------------------------------------------------- decode

void StreamMachine::TakeDecode(Task* t) {
  const Fetched f = fetched_.front();
  fetched_.pop_front();
  ++decode_inflight_;
  t->kind = TaskKind::kDecode;
  t->batch = f.batch;
  t->position = f.position;
  t->buffer = f.buffer;
}

void StreamMachine::RunDecode(Task* t, SampleDecoder* decoder) const {
  const BatchWork* b = t->batch;
  const std::vector<uint8_t>& buf = buffers_[t->buffer];
  const uint64_t index = b->sample_index(t->position);
  const BatchLayout& l = config_.plan.layout;
  uint8_t* slot = arena_->slot(b->slot);
  uint8_t* dst = slot + l.images_offset + t->position * l.sample_bytes;
  Rng rng = Rng::ForKeys(config_.plan.options.seed, b->epoch, index);
  // A cancel (or any failure of the stream) ends a long decode where its
  // time budget is checked; its result is dropped (CompleteDecode).
  const TaskCancelScope cancel_scope(&stop_decoding_);
  const std::span<const uint8_t> read(buf.data(), buf.size());
  const SampleParts* parts = config_.pipeline->parts.get();
  const std::span<const uint8_t> bytes = parts != nullptr ? parts->Media(index, read) : read;
  std::string* key = cache_ != nullptr ? &cache_keys_[t->buffer] : nullptr;
  if (key != nullptr && !key->empty()) {
    // Decoded into a buffer of its own, copied into the slot and cached
    // (see the header: slot memory is never what the cache keeps).
    auto output = std::make_shared<std::vector<uint8_t>>(l.sample_bytes);
    t->status = decoder->Run(bytes, config_.plan.transform, rng, output->data());
    if (t->status.ok()) {
      std::memcpy(dst, output->data(), l.sample_bytes);
      cache_->Insert(std::move(*key), std::move(output));  // failed samples are not cached
    }
    key->clear();
  } else {
    t->status = decoder->Run(bytes, config_.plan.transform, rng, dst);
  }
  if (t->status.ok() && !l.fields.empty()) {
    t->status = WriteFields(slot, t->position, index, read, decoder);
  }
  // A buffer that grew for a large file is not kept at that size: streams
  // would otherwise keep max_file_bytes per buffer for good. Freed here,
  // outside the lock, by the task that owns the buffer.
  if (buf.capacity() > KeptCapacity(t->buffer)) std::vector<uint8_t>().swap(buffers_[t->buffer]);
  WriteLabelAndIndex(slot, t->position, index);
}

BatchWork* StreamMachine::CompleteDecode(Task* t, Outbox* out) {
  StageStats& st = stage(Stage::kDecode);
  st.busy_ns += t->finished_ns - t->started_ns;
  ++st.items_in;
  --decode_inflight_;
  held_bytes_ -= buffer_bytes_[t->buffer];
  buffer_bytes_[t->buffer] = 0;
  free_buffers_.push_back(t->buffer);
  if (terminal_) return nullptr;
  if (t->status.ok()) {
    ++st.items_out;
  } else {
    CountFailure(&st, t->status);
    RecordFailure(t->batch, t->position, t->status);
  }
  return PositionDone(t->batch, out);
}

// ---------------------------------------------------------------- failure

void StreamMachine::Fail(absl::Status why, Outbox* out) {
  if (terminal_) return;
  terminal_ = true;
  stop_decoding_.store(true, std::memory_order_relaxed);  // decodes running give up
  error_ = std::move(why);
  // Work not yet started is dropped; tasks in flight finish and are ignored.
  for (const Fetched& f : fetched_) {
    held_bytes_ -= buffer_bytes_[f.buffer];
    buffer_bytes_[f.buffer] = 0;
    free_buffers_.push_back(f.buffer);
  }
  fetched_.clear();
  retries_.clear();
  deferred_waiting_ = 0;
  // Reads parked on the network end now (their dones complete the tasks).
  CancelParked(out);
  // Batches being finished are dropped as their done comes; those whose
  // done came (waiting for an earlier one) now.
  DropFinished();
  Notify(out);
  CheckInvariants();
}

// ---------------------------------------------------------------- statistics

void StreamMachine::UpdateClocks(uint64_t now) {
  auto set = [&](Stage st, StageClock::State state)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { clocks_[StageIndex(st)].Set(state, now); };
  const bool fetchable = Fetchable() != nullptr || !retries_.empty();
  const bool done = terminal_ || AllStarted();
  set(Stage::kSample, plan_pending_ ? StageClock::kActive : StageClock::kStarved);
  if (!fetchable) {
    set(Stage::kFetch, StageClock::kStarved);
  } else if (fetched_.size() + fetch_inflight_ >= limits_.fetch_queue_capacity ||
             free_buffers_.empty() || ChargedBytes() >= config_.fetch_bytes ||
             deferred_waiting_ != 0) {
    set(Stage::kFetch, StageClock::kBlocked);
  } else {
    set(Stage::kFetch, StageClock::kActive);
  }
  set(Stage::kDecode,
      fetched_.empty() && decode_inflight_ == 0 ? StageClock::kStarved : StageClock::kActive);
  // Collate waits for output space when no slot is free and none is being
  // filled: every slot is ready or held by the consumer (backpressure).
  if (!done && free_slots_.empty() && (open_.empty() || !ready_.empty() || !finishing_.empty())) {
    set(Stage::kCollate, StageClock::kBlocked);
  } else if (open_.empty()) {
    set(Stage::kCollate, StageClock::kStarved);
  } else {
    set(Stage::kCollate, StageClock::kActive);
  }
  set(Stage::kDeliver,
      ready_.empty() && finishing_.empty() ? StageClock::kStarved : StageClock::kActive);
  if (!tuner_.has_value()) return;
  uint32_t bits = 0;
  auto mark = [&bits](AutotuneClock::Signal s, bool on) { bits |= on ? 1u << s : 0; };
  mark(AutotuneClock::kClientStarved, asked_ && !terminal_ && ready_.empty());
  if (fetchable) {
    const bool at_limit = fetch_inflight_ >= limits_.fetch_concurrency;
    mark(AutotuneClock::kFetchAtLimit, at_limit);
    mark(AutotuneClock::kFetchQueueFull,
         !at_limit && (fetched_.size() + fetch_inflight_ >= limits_.fetch_queue_capacity ||
                       free_buffers_.empty()));
    mark(AutotuneClock::kFetchBytesFull,
         ChargedBytes() >= config_.fetch_bytes || deferred_waiting_ != 0);
  }
  mark(AutotuneClock::kDecodeStarved,
       !done && fetched_.empty() && decode_inflight_ < limits_.decode_concurrency);
  mark(AutotuneClock::kDecodeAtLimit,
       !fetched_.empty() && decode_inflight_ >= limits_.decode_concurrency);
  mark(AutotuneClock::kDecodeNoWorker,
       !fetched_.empty() && decode_inflight_ < limits_.decode_concurrency);
  tune_clock_.Set(bits, now);
}

void StreamMachine::MaybeTune(uint64_t now, Outbox* out) {
  if (now < tune_clock_.tick_start_ns() + config_.autotune_options.tick_ns) return;
  const AutotuneObservation o = tune_clock_.Take(now, positions_done_ - positions_at_tick_);
  positions_at_tick_ = positions_done_;
  const AutotuneLimits before = limits_;
  const AutotuneDecision d = tuner_->Observe(o);
  if (!d.changed) return;
  limits_ = tuner_->limits();
  out->debug_lines.push_back(absl::StrFormat(
      "pipeline %s stream %d: autotune: fetch concurrency %d, decode concurrency %d, fetch queue "
      "capacity %d (were %d, %d, %d): %s",
      config_.pipeline->name, config_.id, limits_.fetch_concurrency, limits_.decode_concurrency,
      limits_.fetch_queue_capacity, before.fetch_concurrency, before.decode_concurrency,
      before.fetch_queue_capacity, d.reason));
}

void StreamMachine::SnapshotStages(uint64_t now, std::array<StageStats, kNumStages>* out) {
  *out = stages_;
  for (int i = 0; i < kNumStages; ++i) clocks_[i].AddTo(&(*out)[i], now);
  StageStats& fetch = (*out)[StageIndex(Stage::kFetch)];
  fetch.in_flight = fetch_inflight_;
  StageStats& decode = (*out)[StageIndex(Stage::kDecode)];
  decode.queue_size = fetched_.size();
  decode.queue_capacity = limits_.fetch_queue_capacity;
  decode.in_flight = decode_inflight_;
  StageStats& collate = (*out)[StageIndex(Stage::kCollate)];
  collate.queue_size = open_.size();
  collate.queue_capacity = config_.plan.options.num_slots;
  StageStats& deliver = (*out)[StageIndex(Stage::kDeliver)];
  deliver.queue_size = ready_.size();
  deliver.queue_capacity = config_.plan.options.num_slots;
  deliver.in_flight = finishing_.size();  // batches the finisher has
}

StreamStats StreamMachine::Stats(uint64_t now) {
  StreamStats st;
  st.stream_id = config_.id;
  st.pipeline = config_.pipeline->name;
  st.batches_emitted = emitted_;
  st.samples_emitted = samples_emitted_;
  st.samples_failed = samples_failed_;
  st.output_cache_hits = cache_hits_;
  st.output_cache_misses = cache_misses_;
  st.slots_total = config_.plan.options.num_slots;
  st.slots_held_by_consumer = slots_held_;
  st.consumers_waiting = consumers_waiting_;
  st.elapsed_ns = now - created_ns_;
  st.fetches_pending = parked_count_;
  st.fetches_deferred = fetches_deferred_;
  const Parked* oldest = nullptr;
  for (const Parked& p : parked_) {
    if (p.active && (oldest == nullptr || p.started_ns < oldest->started_ns)) oldest = &p;
  }
  if (oldest != nullptr) {
    StreamStats::PendingFetch f;
    f.sample_index = oldest->index;
    f.age_ns = now > oldest->started_ns ? now - oldest->started_ns : 0;
    if (oldest->read != nullptr) {  // (a progress call reads atomics only)
      PendingRead::Progress pr = oldest->read->progress();
      f.object = std::move(pr.object);
      f.host = std::move(pr.host);
      f.bytes_received = pr.bytes_received;
    }
    st.oldest_fetch = std::move(f);
  }
  SnapshotStages(now, &st.stages);
  st.autotune.enabled = tuner_.has_value();
  st.autotune.fetch_concurrency = limits_.fetch_concurrency;
  st.autotune.decode_concurrency = limits_.decode_concurrency;
  st.autotune.fetch_queue_capacity = limits_.fetch_queue_capacity;
  if (tuner_.has_value()) {
    st.autotune.changes = tuner_->changes();
    st.autotune.reason = tuner_->reason();
  }
  return st;
}

void StreamMachine::CheckInvariants() const {
#ifndef NDEBUG
  mu_.AssertHeld();
  const size_t slots = config_.plan.options.num_slots;
  // Every slot is in exactly one place.
  std::vector<uint8_t> seen(slots, 0);
  auto mark = [&](uint32_t slot) {
    assert(slot < slots);
    assert(!seen[slot]);
    seen[slot] = 1;
  };
  uint64_t bytes = 0;
  for (const uint64_t b : buffer_bytes_) bytes += b;
  assert(bytes == held_bytes_);
  uint32_t deferred = 0;
  for (const PendingRetry& r : retries_) deferred += r.deferred ? 1 : 0;
  assert(deferred == deferred_waiting_);
  assert(reserved_bytes_ == 0 || fetch_inflight_ != 0);
  for (uint32_t s : free_slots_) mark(s);
  for (const auto& b : open_) mark(b->slot);
  for (const BatchInfo& b : ready_) mark(b.slot);
  for (const Finishing& f : finishing_) mark(f.batch.slot);
  uint32_t held = 0;
  for (uint32_t s = 0; s < slots; ++s) {
    if (consumer_holds_[s]) {
      mark(s);
      ++held;
    }
  }
  assert(held == slots_held_);
  assert(free_slots_.size() + open_.size() + finishing_.size() + ready_.size() + held == slots);
  // Every buffer is free, queued for decode, or owned by a running task.
  assert(free_buffers_.size() + fetched_.size() + fetch_inflight_ + decode_inflight_ ==
         buffers_.size());
  assert(fetch_inflight_ + decode_inflight_ <= tasks_inflight_);
  assert(parked_count_ <= fetch_inflight_);
  // A terminal stream queues no work.
  assert(!terminal_ || (fetched_.empty() && retries_.empty()));
  // Batches are emitted in order, never more than the stream has.
  assert(config_.plan.total_batches == 0 || emitted_ <= config_.plan.total_batches);
#endif
}

}  // namespace conveyor
