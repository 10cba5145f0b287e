// Collate: the last stage of a batch. Once every sample of a batch is
// written or failed, the surviving samples are moved together (compaction),
// the pipeline's failure policy is applied, and the batch is emitted to the
// consumer in stream order (StreamMachine's collate methods, in
// core/engine/collate.cc). The pure parts are here so they can be tested alone.
//
// Thread-safety: pure functions over the caller's data.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "core/engine/batch_layout.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/stream.h"

namespace conveyor {

// Moves the samples whose failed[i] == 0 (images, labels, indices) to the
// front of `slot`, keeping their order. Returns how many survived.
// REQUIRES: slot holds failed.size() samples laid out by `layout`.
uint32_t CompactSamples(const BatchLayout& layout, uint8_t* slot, std::span<const uint8_t> failed);

// Packs each field area of `slot` (BatchLayout): the values of the samples
// whose failed[i] == 0, written at their positions' strides, are moved
// together in order, Arrow-style (value i is data[offsets[i], offsets[i+1])),
// and their present flags with them. REQUIRES: every surviving position's
// length and flag were written (StreamMachine::WriteFields).
void PackFieldAreas(const BatchLayout& layout, uint8_t* slot, std::span<const uint8_t> failed);

// The failure policy after a batch with failures: OK to deliver it, or the
// DataLoss status that ends the stream (fail_fast: at the first failure;
// skip: once more than max_failure_rate of samples_seen failed, judged after
// failure_rate_min_samples). `first` is the batch's first failure, named in
// the status. Errors of the system never reach this (they are retried).
absl::Status ApplyFailurePolicy(const PipelineConfig& pipeline, uint64_t samples_seen,
                                uint64_t samples_failed, const SampleFailure& first);

}  // namespace conveyor
