#include "core/engine/stream.h"

#include "core/engine/scheduler.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

Stream::Stream(std::shared_ptr<Scheduler> scheduler, std::shared_ptr<StreamMachine> state)
    : scheduler_(std::move(scheduler)), state_(std::move(state)) {}

Stream::~Stream() {
  scheduler_->Close(state_.get());
  // Before the slots can go: no finish of this stream is in flight after it.
  state_->DrainFinisher();
}

uint64_t Stream::id() const { return state_->id(); }
const PipelineConfig& Stream::pipeline() const { return *state_->config().pipeline; }
const StreamOptions& Stream::options() const { return state_->config().plan.options; }
const BatchLayout& Stream::layout() const { return state_->config().plan.layout; }
const SlotArena& Stream::arena() const { return state_->arena(); }
const StreamPlan& Stream::plan() const { return state_->config().plan; }
uint64_t Stream::samples_per_epoch() const { return state_->config().plan.samples_per_epoch; }

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

}  // namespace conveyor
