// The arithmetic of a PoolStream (pool_stream.h), apart from any daemon:
// how a rank's stream is cut into ranges of batches and what each range
// asks a daemon for, and how two daemons' PipelineInfo are compared.
//
// A range of `count` batches from global batch g is a stream opened at the
// epoch of batch g, resumed at that batch's offset (base + k × batch_size ×
// world_size, base being the resume offset of the stream's first epoch),
// with max_batches `count`; it runs on into the next epochs when the range
// does (the sampler rule of core/data/sampler.h makes that the continuation
// of one daemon's stream).
//
// Thread-safety: RangePlan is a value; its const methods are pure. The
// free functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "conveyor/v1/conveyor.pb.h"

namespace conveyor::client {

struct BatchRange {
  uint64_t g = 0;              // global index of its first batch
  uint64_t count = 0;          // batches
  uint64_t epoch = 0;          // epoch of its first batch
  uint64_t first = 0;          // its first batch's index in that epoch (as the pool counts)
  uint64_t offset = 0;         // resume offset of its first batch
  uint64_t epoch_samples = 0;  // this rank's samples of that epoch
  uint64_t position0 = 0;      // this rank's samples of that epoch before the range
};

struct RangePlanOptions {
  uint64_t dataset_size = 0;
  uint32_t batch_size = 1;
  uint32_t world_size = 1;
  bool drop_last = false;
  uint64_t first_epoch = 0;
  uint64_t num_epochs = 1;  // 0: endless
  uint64_t resume_offset = 0;
  uint32_t range_batches = 8;
};

class RangePlan {
 public:
  // InvalidArgument when the first epoch (from its offset) or a full epoch
  // leaves the rank no sample, or a field is 0 that must not be.
  static absl::StatusOr<RangePlan> Create(const RangePlanOptions& options);

  // Batches of the whole stream; nullopt: endless.
  std::optional<uint64_t> total() const { return total_; }
  uint64_t samples_of(uint64_t epoch) const;
  uint64_t batches_of(uint64_t epoch) const;
  // num_epochs for a stream that starts at `epoch` (0: endless).
  uint64_t epochs_left(uint64_t epoch) const;
  // The range of `count` batches from global batch g.
  BatchRange RangeAt(uint64_t g, uint64_t count) const;
  // The next range of range_batches (fewer at the end); nullopt after the
  // last. Not const: it advances.
  std::optional<BatchRange> Next();

 private:
  explicit RangePlan(const RangePlanOptions& o) : o_(o) {}
  uint64_t base(uint64_t epoch) const { return epoch == o_.first_epoch ? o_.resume_offset : 0; }

  RangePlanOptions o_;
  uint64_t first_batches_ = 0, later_batches_ = 0;
  std::optional<uint64_t> total_;
  uint64_t next_ = 0;
};

// The most batches per range, 1 … 16, such that `ranges_ahead` ranges of
// batches of `batch_size` samples of `info`'s shape and dtype fit in
// `buffer_bytes`.
uint32_t AutoRangeBatches(const v1::PipelineInfo& info, uint32_t batch_size, uint32_t ranges_ahead,
                          uint64_t buffer_bytes);

// nullopt when two PipelineInfos promise the same batches, else the part
// that differs in words: "dataset_size (48 vs 49)", "transform (mode: 0 vs
// 1)", "fingerprint (the daemon reports none: an older conveyord)".
std::optional<std::string> FingerprintDifference(const v1::PipelineInfo& reference,
                                                 const v1::PipelineInfo& other);

}  // namespace conveyor::client
