#include "core/engine/stream_plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/engine/slot_arena.h"

namespace conveyor {
namespace {

// Endless streams start below this epoch, so epoch numbers never wrap.
constexpr uint64_t kMaxEndlessFirstEpoch = uint64_t{1} << 63;

uint64_t BatchesFor(uint64_t samples, uint32_t batch_size) {
  return samples / batch_size + (samples % batch_size != 0);
}

absl::Status CheckFields(const PipelineConfig& p, const StreamOptions& o) {
  if (o.batch_size == 0) return absl::InvalidArgumentError("batch_size must be at least 1");
  if (o.batch_size > p.max_batch_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("batch_size %d exceeds pipeline %s's max_batch_size %d", o.batch_size,
                        p.name, p.max_batch_size));
  }
  if (o.num_slots == 0) return absl::InvalidArgumentError("credits (num_slots) must be at least 1");
  if (!(o.weight > 0) || !std::isfinite(o.weight)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("weight must be a positive finite number, got %g", o.weight));
  }
  if (o.collate_uint8 && p.transform.kind == MediaKind::kAudio) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline %s: audio samples are float32 only; this transport needs uint8 host samples "
        "(collate_uint8) and cannot serve an audio pipeline",
        p.name));
  }
  return absl::OkStatus();
}

// The epochs [first_epoch, first_epoch + num_epochs) must be numbers: their
// exclusive end fits 64 bits; an endless stream starts below 2^63.
absl::Status CheckEpochs(const StreamOptions& o) {
  if (o.num_epochs == 0) {
    if (o.first_epoch >= kMaxEndlessFirstEpoch) {
      return absl::OutOfRangeError(absl::StrFormat(
          "first_epoch %d: an endless stream (num_epochs 0) must start below 2^63 so its epoch "
          "numbers cannot wrap",
          o.first_epoch));
    }
    return absl::OkStatus();
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(o.first_epoch, o.num_epochs, &end)) {
    return absl::OutOfRangeError(
        absl::StrFormat("first_epoch %d + num_epochs %d overflows the 64-bit epoch number",
                        o.first_epoch, o.num_epochs));
  }
  return absl::OkStatus();
}

// Moves the stream's start to `r`, keeping the end of its epochs.
// REQUIRES: CheckEpochs(*o).ok().
absl::Status ApplyResume(const ResumePosition& r, StreamOptions* o) {
  if (o->num_epochs == 0) {
    if (r.epoch < o->first_epoch) {
      return absl::OutOfRangeError(
          absl::StrFormat("resume epoch %d is before first_epoch %d", r.epoch, o->first_epoch));
    }
  } else {
    const uint64_t end = o->first_epoch + o->num_epochs;  // exclusive; fits (CheckEpochs)
    if (r.epoch < o->first_epoch || r.epoch >= end) {
      return absl::OutOfRangeError(absl::StrFormat(
          "resume epoch %d is outside the stream's epochs [%d, %d)", r.epoch, o->first_epoch, end));
    }
    o->num_epochs = end - r.epoch;
  }
  o->first_epoch = r.epoch;
  o->epoch_offset = r.offset;
  return CheckEpochs(*o);  // an endless stream resumed at or past 2^63
}

}  // namespace

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

absl::StatusOr<StreamPlan> PlanStream(const PipelineConfig& p, const StreamOptions& options,
                                      const std::optional<ResumePosition>& resume) {
  StreamPlan plan;
  StreamOptions& o = plan.options;
  o = options;
  RETURN_IF_ERROR(CheckFields(p, o));
  RETURN_IF_ERROR(CheckEpochs(o));
  if (resume.has_value()) RETURN_IF_ERROR(ApplyResume(*resume, &o));

  const SamplerOptions first = SamplerOptionsFor(p, o, o.first_epoch);
  if (absl::Status s = ValidateSamplerOptions(first); !s.ok()) {
    if (!resume.has_value()) return s;
    return absl::Status(s.code(), absl::StrFormat("resume offset %d of epoch %d: %s",
                                                  resume->offset, resume->epoch, s.message()));
  }
  SamplerOptions full = first;
  full.offset = 0;  // later epochs start at their beginning
  plan.first_epoch_samples = SamplesPerRank(first);
  plan.first_epoch_batches = BatchesFor(plan.first_epoch_samples, o.batch_size);
  plan.samples_per_epoch = SamplesPerRank(full);
  plan.batches_per_epoch = BatchesFor(plan.samples_per_epoch, o.batch_size);

  if (o.num_epochs != 0) {
    uint64_t rest = 0;
    if (__builtin_mul_overflow(o.num_epochs - 1, plan.batches_per_epoch, &rest) ||
        __builtin_add_overflow(plan.first_epoch_batches, rest, &plan.total_batches)) {
      return absl::OutOfRangeError(absl::StrFormat(
          "num_epochs %d: %d + (%d - 1) x %d batches overflows the 64-bit batch count",
          o.num_epochs, plan.first_epoch_batches, o.num_epochs, plan.batches_per_epoch));
    }
  }

  if (o.max_batches != 0 && (plan.total_batches == 0 || o.max_batches < plan.total_batches)) {
    plan.total_batches = o.max_batches;
  }

  // batch_size <= max_batch_size and the validated transform keep one slot
  // far from overflow; the arena's product is checked.
  plan.transform = p.transform;
  if (o.collate_uint8) plan.transform.dtype = DType::kUint8;
  plan.layout = BatchLayout::For(plan.transform, o.batch_size, p.fields);
  plan.slot_bytes = SlotArena::MappedBytes(1, plan.layout.slot_bytes);
  if (__builtin_mul_overflow(plan.slot_bytes, uint64_t{o.num_slots}, &plan.arena_bytes)) {
    return absl::OutOfRangeError(
        absl::StrFormat("credits (num_slots) %d x %d bytes per slot overflows 64 bits", o.num_slots,
                        plan.slot_bytes));
  }
  return plan;
}

}  // namespace conveyor
