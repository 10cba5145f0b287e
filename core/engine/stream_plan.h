// StreamPlan: a stream's geometry, derived once from its pipeline and its
// options — the batch layout, the slot and arena bytes, this rank's samples
// and batches per epoch, the stream's total batch count and where it starts
// (a resume position applied). The service validates a request, checks the
// memory budget and fills StreamOpened from the plan; the engine opens the
// stream from the same plan, so what the client is told and what the engine
// delivers cannot disagree.
//
// One overflow rule: every number the plan derives is computed with checked
// 64-bit arithmetic; a request whose numbers do not fit is OutOfRange and
// names the field that overflows. A field outside its own range is
// InvalidArgument naming it (OutOfRange for a resume position past its
// epoch, as the sampler reports it).
//
// A plain value; PlanStream is a pure function (thread-safe).
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "core/data/sampler.h"
#include "core/engine/batch_layout.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/stream.h"

namespace conveyor {

// Where a stream resumes: `offset` samples of `epoch`'s global order were
// consumed by all ranks together (BatchInfo::offset of the last batch taken,
// possibly at another world size).
struct ResumePosition {
  uint64_t epoch = 0;
  uint64_t offset = 0;
};

struct StreamPlan {
  // The options the engine runs: the request's, with a resume applied
  // (first_epoch = the resume epoch, num_epochs = the epochs left of the
  // request's range, epoch_offset = the resume offset).
  StreamOptions options;
  // What the decoders write into the host slots: the pipeline's transform,
  // with dtype uint8 under options.collate_uint8 (the finisher converts).
  TransformSpec transform;
  BatchLayout layout;                // of the host slots (BatchLayout::For(transform, batch_size))
  uint64_t slot_bytes = 0;           // one slot as mapped (layout.slot_bytes rounded up to pages)
  uint64_t arena_bytes = 0;          // options.num_slots × slot_bytes: the stream's slot memory
  uint64_t samples_per_epoch = 0;    // this rank's, in a full epoch
  uint64_t batches_per_epoch = 0;    // ... in batches (the last one may be short)
  uint64_t first_epoch_samples = 0;  // this rank's in the first epoch, after epoch_offset
  uint64_t first_epoch_batches = 0;
  // Over the whole stream (at most options.max_batches when that is set);
  // 0: endless.
  uint64_t total_batches = 0;
};

// The plan of a stream of `options` on `pipeline` (REQUIRES: a valid
// pipeline), starting at `resume` when given (which must lie in the epochs
// [options.first_epoch, options.first_epoch + options.num_epochs)).
// Errors, each naming the field:
//   InvalidArgument: batch_size 0 or over the pipeline's max_batch_size,
//     credits (num_slots) 0, rank >= world_size, world_size 0, drop_last with
//     fewer samples than ranks, collate_uint8 on an audio pipeline;
//   OutOfRange: first_epoch + num_epochs past 2^64 (the exclusive end of the
//     epochs must fit), an endless stream from first_epoch >= 2^63, a resume
//     epoch outside the stream's epochs, a resume/epoch offset at or past the
//     end of its epoch ("resume offset ..."), the total batch count
//     (first epoch's + (num_epochs − 1) × a full epoch's) past 2^64
//     ("num_epochs"), the arena past 2^64 bytes ("credits (num_slots)").
absl::StatusOr<StreamPlan> PlanStream(const PipelineConfig& pipeline, const StreamOptions& options,
                                      const std::optional<ResumePosition>& resume = std::nullopt);

// The sampler's view of `epoch` of a stream (the epoch offset applies to the
// stream's first epoch only).
SamplerOptions SamplerOptionsFor(const PipelineConfig& pipeline, const StreamOptions& options,
                                 uint64_t epoch);

}  // namespace conveyor
