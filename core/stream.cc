#include "core/stream.h"

#include "absl/strings/str_format.h"
#include "core/sampler.h"
#include "core/scheduler.h"

namespace conveyor {

Stream::Stream(std::shared_ptr<Scheduler> scheduler, std::shared_ptr<StreamState> state)
    : scheduler_(std::move(scheduler)), state_(std::move(state)) {}

Stream::~Stream() { scheduler_->Cancel(state_.get(), absl::CancelledError("stream closed")); }

uint64_t Stream::id() const { return state_->id; }
const PipelineConfig& Stream::pipeline() const { return *state_->pipeline; }
const StreamOptions& Stream::options() const { return state_->options; }
const BatchLayout& Stream::layout() const { return state_->layout; }
const SlotArena& Stream::arena() const { return *state_->arena; }
uint64_t Stream::samples_per_epoch() const { return state_->samples_per_epoch; }

Stream::Poll Stream::TryNext(BatchInfo* batch, absl::Status* error) {
  return scheduler_->TryNext(state_.get(), batch, error);
}

absl::StatusOr<std::optional<BatchInfo>> Stream::Next(absl::Duration timeout) {
  return scheduler_->Next(state_.get(), timeout);
}

absl::Status Stream::Release(uint32_t slot) { return scheduler_->Release(state_.get(), slot); }

void Stream::Cancel(absl::Status why) { scheduler_->Cancel(state_.get(), std::move(why)); }

void Stream::SetReadyCallback(std::function<void()> cb) {
  scheduler_->SetReadyCallback(state_.get(), std::move(cb));
}

StreamStats Stream::Stats() const { return scheduler_->Stats(state_.get()); }

absl::Status ValidateStreamOptions(const PipelineConfig& p, const StreamOptions& o) {
  if (o.batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (o.batch_size > p.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch_size %d exceeds pipeline %s's max_batch_size %d", o.batch_size, p.name,
        p.max_batch_size));
  }
  if (o.num_slots == 0) return absl::InvalidArgumentError("credits (num_slots) must be at least 1");
  return ValidateSamplerOptions(SamplerOptionsFor(p, o, o.first_epoch));
}

SamplerOptions SamplerOptionsFor(const PipelineConfig& p, const StreamOptions& o, uint64_t epoch) {
  SamplerOptions so;
  so.dataset_size = p.dataset->size();
  so.seed = o.seed;
  so.epoch = epoch;
  so.rank = o.rank;
  so.world_size = o.world_size;
  so.shuffle = o.shuffle;
  so.drop_last = o.drop_last;
  so.offset = epoch == o.first_epoch ? o.epoch_offset : 0;
  return so;
}

}  // namespace conveyor
