#include "core/engine/stream.h"

#include "absl/strings/str_format.h"
#include "core/data/sampler.h"
#include "core/engine/scheduler.h"
#include "core/base/status_macros.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

Stream::Stream(std::shared_ptr<Scheduler> scheduler, std::shared_ptr<StreamMachine> state)
    : scheduler_(std::move(scheduler)), state_(std::move(state)) {}

Stream::~Stream() { scheduler_->Close(state_.get()); }

uint64_t Stream::id() const { return state_->id(); }
const PipelineConfig& Stream::pipeline() const { return *state_->config().pipeline; }
const StreamOptions& Stream::options() const { return state_->config().options; }
const BatchLayout& Stream::layout() const { return state_->config().layout; }
const SlotArena& Stream::arena() const { return state_->arena(); }
uint64_t Stream::samples_per_epoch() const { return state_->config().samples_per_epoch; }

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

namespace {

uint64_t BatchesFor(uint64_t samples, uint32_t batch_size) {
  return samples / batch_size + (samples % batch_size != 0);
}

// Endless streams start below this epoch, so epoch numbers never wrap.
constexpr uint64_t kMaxEndlessFirstEpoch = uint64_t{1} << 63;

}  // namespace

absl::StatusOr<uint64_t> TotalBatches(const PipelineConfig& p, const StreamOptions& o) {
  RETURN_IF_ERROR(ValidateSamplerOptions(SamplerOptionsFor(p, o, o.first_epoch)));
  if (o.batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (o.num_epochs == 0) {
    if (o.first_epoch >= kMaxEndlessFirstEpoch) {
      return absl::OutOfRangeError(absl::StrFormat(
          "first_epoch %d: an endless stream (num_epochs 0) must start below 2^63 so its epoch "
          "numbers cannot wrap",
          o.first_epoch));
    }
    return 0;
  }
  // The last epoch, first_epoch + num_epochs - 1, must exist.
  if (o.num_epochs - 1 > ~uint64_t{0} - o.first_epoch) {
    return absl::OutOfRangeError(absl::StrFormat(
        "first_epoch %d + num_epochs %d overflows the 64-bit epoch number", o.first_epoch,
        o.num_epochs));
  }
  const uint64_t first =
      BatchesFor(SamplesPerRank(SamplerOptionsFor(p, o, o.first_epoch)), o.batch_size);
  SamplerOptions full = SamplerOptionsFor(p, o, o.first_epoch);
  full.offset = 0;  // later epochs start at their beginning
  const uint64_t per_epoch = BatchesFor(SamplesPerRank(full), o.batch_size);
  uint64_t rest = 0, total = 0;
  if (__builtin_mul_overflow(o.num_epochs - 1, per_epoch, &rest) ||
      __builtin_add_overflow(first, rest, &total)) {
    return absl::OutOfRangeError(absl::StrFormat(
        "num_epochs %d: %d + (%d - 1) x %d batches overflows the 64-bit batch count",
        o.num_epochs, first, o.num_epochs, per_epoch));
  }
  return total;
}

absl::Status ValidateStreamOptions(const PipelineConfig& p, const StreamOptions& o) {
  if (o.batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (o.batch_size > p.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch_size %d exceeds pipeline %s's max_batch_size %d", o.batch_size, p.name,
        p.max_batch_size));
  }
  if (o.num_slots == 0) return absl::InvalidArgumentError("credits (num_slots) must be at least 1");
  // batch_size ≤ max_batch_size and the validated transform keep the slot
  // size far from overflow; the arena's product is checked.
  const BatchLayout layout = BatchLayout::For(p.transform, o.batch_size);
  if (SlotArena::MappedBytes(1, layout.slot_bytes) > ~uint64_t{0} / o.num_slots) {
    return absl::OutOfRangeError(absl::StrFormat(
        "credits (num_slots) %d x %d bytes per slot overflows 64 bits", o.num_slots,
        layout.slot_bytes));
  }
  return TotalBatches(p, o).status();
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
  so.order = p.order.get();
  return so;
}

}  // namespace conveyor
