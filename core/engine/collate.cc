// Collate: compaction, the failure policy, in-order emission and the finish
// step. The StreamMachine methods here run under the scheduler lock, except
// CompactBatch, which a worker runs without it once the batch is complete,
// and StartFinish / DrainFinisher, which run without it.
#include "core/engine/collate.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

uint32_t CompactSamples(const BatchLayout& layout, uint8_t* slot, std::span<const uint8_t> failed) {
  const size_t bytes = layout.sample_bytes;
  auto* labels = reinterpret_cast<int64_t*>(slot + layout.labels_offset);
  auto* indices = reinterpret_cast<int64_t*>(slot + layout.indices_offset);
  uint8_t* images = slot + layout.images_offset;
  uint32_t w = 0;
  for (uint32_t r = 0; r < failed.size(); ++r) {
    if (failed[r]) continue;
    if (w != r) {
      std::memmove(images + w * bytes, images + r * bytes, bytes);
      labels[w] = labels[r];
      indices[w] = indices[r];
    }
    ++w;
  }
  return w;
}

void PackFieldAreas(const BatchLayout& layout, uint8_t* slot, std::span<const uint8_t> failed) {
  for (const BatchLayout::FieldArea& area : layout.fields) {
    uint8_t* offsets = slot + area.offsets_offset;
    uint8_t* present = slot + area.present_offset;
    uint8_t* data = slot + area.data_offset;
    uint32_t packed = 0;  // bytes of the values kept so far
    uint32_t w = 0;
    std::memcpy(offsets, &packed, sizeof(packed));
    for (uint32_t r = 0; r < failed.size(); ++r) {
      if (failed[r]) continue;
      // Read before anything at or past r + 1 is written: w <= r.
      uint32_t length;
      std::memcpy(&length, offsets + sizeof(uint32_t) * (size_t{r} + 1), sizeof(length));
      // packed <= r × stride: the move only ever goes down (or stays).
      if (length != 0) std::memmove(data + packed, data + size_t{r} * area.stride, length);
      present[w] = present[r];
      packed += length;
      ++w;
      std::memcpy(offsets + sizeof(uint32_t) * size_t{w}, &packed, sizeof(packed));
    }
  }
}

absl::Status ApplyFailurePolicy(const PipelineConfig& p, uint64_t samples_seen,
                                uint64_t samples_failed, const SampleFailure& f) {
  if (p.error_policy == ErrorPolicy::kFailFast) {
    return absl::DataLossError(
        absl::StrFormat("pipeline %s: sample %d (%s) failed: %s (error_policy fail_fast)", p.name,
                        f.sample_index, f.path, f.reason));
  }
  const double rate = samples_seen == 0 ? 0 : static_cast<double>(samples_failed) / samples_seen;
  if (samples_seen >= p.failure_rate_min_samples && rate > p.max_failure_rate) {
    return absl::DataLossError(absl::StrFormat(
        "pipeline %s: %d of %d samples failed (%.1f%%), above max_failure_rate %.1f%%; last: "
        "sample %d (%s): %s",
        p.name, samples_failed, samples_seen, 100 * rate, 100 * p.max_failure_rate, f.sample_index,
        f.path, f.reason));
  }
  return absl::OkStatus();
}

void StreamMachine::RecordFailure(BatchWork* b, uint32_t pos, const absl::Status& st) {
  const uint64_t index = b->sample_index(pos);
  SampleFailure f;
  f.sample_index = index;
  // Dataset-supplied text (a name, or a reason quoting it) goes into log
  // lines, statuses and Batch messages: escaped once here (valid UTF-8, no
  // control characters; see core/base/text_escape.h).
  f.path = EscapeText(config_.pipeline->dataset->relative_path(index));
  f.reason = EscapeText(st.message());
  b->failed[pos] = 1;
  b->failures.emplace_back(pos, std::move(f));
}

BatchWork* StreamMachine::PositionDone(BatchWork* b, Outbox* out) {
  ++positions_done_;
  if (++b->done != b->size) return nullptr;
  stage(Stage::kCollate).items_in += b->size;
  // Compacted (and its field areas packed) without the lock first.
  if (!b->failures.empty() || !config_.plan.layout.fields.empty()) return b;
  b->finalized = true;
  EmitInOrder(out);
  return nullptr;
}

void StreamMachine::CompactBatch(const BatchWork& b) const {
  uint8_t* slot = arena_->slot(b.slot);
  if (!b.failures.empty()) CompactSamples(config_.plan.layout, slot, b.failed);
  PackFieldAreas(config_.plan.layout, slot, b.failed);
}

void StreamMachine::FinishCompaction(BatchWork* b, uint64_t busy_ns, Outbox* out) {
  stage(Stage::kCollate).busy_ns += busy_ns;
  b->finalized = true;  // still in open_: a terminal stream keeps its batches
  EmitInOrder(out);
  UpdateClocks(MonotonicNanos());
  CheckInvariants();
}

void StreamMachine::EmitInOrder(Outbox* out) {
  const PipelineConfig& p = *config_.pipeline;
  bool news = false;
  while (!terminal_ && !open_.empty() && open_.front()->finalized) {
    std::unique_ptr<BatchWork> b = std::move(open_.front());
    open_.pop_front();
    std::sort(b->failures.begin(), b->failures.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    samples_seen_ += b->size;
    samples_failed_ += b->failures.size();
    if (!b->failures.empty()) {
      const SampleFailure& f = b->failures.front().second;
      out->warnings.push_back(absl::StrFormat(
          "pipeline %s stream %d: %d sample(s) failed in batch %d of epoch %d; first: sample %d "
          "(%s): %s",
          p.name, config_.id, b->failures.size(), b->batch_in_epoch, b->epoch, f.sample_index,
          f.path, f.reason));
      if (absl::Status st = ApplyFailurePolicy(p, samples_seen_, samples_failed_, f); !st.ok()) {
        free_slots_.push_back(b->slot);  // not emitted: its slot is free again
        Fail(std::move(st), out);
        return;
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
    ++stage(Stage::kCollate).items_out;
    ++stage(Stage::kDeliver).items_in;
    if (config_.plan.options.finisher != nullptr) {
      // Ready once finished; the Finish call is made without the lock.
      finishing_.push_back(Finishing{info, false, absl::OkStatus()});
      out->finishes.push_back(Outbox::PendingFinish{shared_from_this(), std::move(info)});
    } else {
      MakeReady(std::move(info));
      news = true;
    }
  }
  if (news) Notify(out);
}

void StreamMachine::MakeReady(BatchInfo info) {
  samples_emitted_ += info.num_samples;
  ++emitted_;
  ready_.push_back(std::move(info));
}

// ---------------------------------------------------------------- finish

void StreamMachine::StartFinish(const BatchInfo& batch) {
  MutexLock lock(&finish_mu_);
  // The handle is gone (its destructor closed the stream first): nobody
  // takes this batch, and the finisher may be gone with the transport.
  if (finisher_drained_) return;
  config_.plan.options.finisher->Finish(batch,
                                        [this, sequence = batch.sequence](absl::Status status) {
                                          config_.finish_done(this, sequence, std::move(status));
                                        });
}

void StreamMachine::DrainFinisher() {
  if (config_.plan.options.finisher == nullptr) return;
  {
    MutexLock lock(&finish_mu_);
    finisher_drained_ = true;
  }
  config_.plan.options.finisher->Drain();
}

void StreamMachine::FinishDone(uint64_t sequence, absl::Status status, Outbox* out) {
  auto it = std::find_if(finishing_.begin(), finishing_.end(),
                         [&](const Finishing& f) { return f.batch.sequence == sequence; });
  if (it == finishing_.end() || it->done) {
    // Exactly one done per Finish is the finisher's contract.
    out->warnings.push_back(absl::StrFormat(
        "pipeline %s stream %d: the finisher reported batch %d done, which is not being finished",
        config_.pipeline->name, config_.id, sequence));
    return;
  }
  it->done = true;
  it->status = std::move(status);
  if (terminal_) {
    DropFinished();  // cancelled or failed meanwhile: the slot is free, the batch dropped
  } else {
    ReadyFinished(out);
  }
  UpdateClocks(MonotonicNanos());
  CheckInvariants();
}

void StreamMachine::ReadyFinished(Outbox* out) {
  bool news = false;
  while (!terminal_ && !finishing_.empty() && finishing_.front().done) {
    Finishing f = std::move(finishing_.front());
    finishing_.pop_front();
    if (!f.status.ok()) {
      CountFailure(&stage(Stage::kDeliver), f.status);
      free_slots_.push_back(f.batch.slot);
      Fail(std::move(f.status), out);  // drops the later batches already finished
      return;
    }
    MakeReady(std::move(f.batch));
    news = true;
  }
  if (news) Notify(out);
}

void StreamMachine::DropFinished() {
  for (auto it = finishing_.begin(); it != finishing_.end();) {
    if (it->done) {
      free_slots_.push_back(it->batch.slot);
      it = finishing_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace conveyor
