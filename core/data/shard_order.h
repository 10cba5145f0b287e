// ShardOrder: the epoch permutation P (core/data/sampler.h, EpochOrder) of a
// dataset made of shards (tar shards, core/data/tar_dataset.h), so that reads stay
// local — consecutive samples come from the same shard, near each other —
// while the order is still shuffled and the sampler's rank dealing and
// offset-based resume apply unchanged.
//
// The rule, for shards 0..S-1 holding n_0..n_{S-1} samples (sample indices
// numbered shard after shard, in archive order) and buffer size B:
//   - !shuffle: P is the identity (shards in the order given, members in
//     archive order).
//   - shuffle:
//     1. The shard order: a Fisher-Yates shuffle of [0, S) driven by
//        Rng::ForKeys(seed, epoch, kShardTag), from the back (as the global
//        sampler's).
//     2. The stream: the samples of the shards in that order, each shard's in
//        archive order.
//     3. The shuffle buffer (WebDataset's): items of the stream enter a buffer
//        of at most B; once it is full, each new item replaces a uniformly
//        picked one (Rng::ForKeys(seed, epoch, kBufferTag).Below(B)), which
//        is emitted; when the stream ends, the rest is emitted by repeatedly
//        picking one of the k left (Below(k)) and moving the last into its
//        place. B <= 1 emits the stream as it is.
//   So P is a permutation (every sample exactly once per epoch), a pure
//   function of (shard sizes, B, seed, epoch), and a sample is emitted at
//   most about B positions before it entered, so a window of ~B consecutive
//   positions touches only the shards the buffer spans. Ranks take every
//   W-th position of P (core/data/sampler.h), so each rank reads the same few
//   shards at a time; resume records the global position reached, as with
//   any P.
//
// Thread-safety: immutable; Permutation is safe concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "core/data/sampler.h"

namespace conveyor {

class ShardOrder final : public EpochOrder {
 public:
  // `shard_sizes`: samples per shard in index order. `buffer`: B.
  ShardOrder(std::vector<uint64_t> shard_sizes, uint64_t buffer);

  uint64_t size() const override { return size_; }
  std::vector<uint64_t> Permutation(uint64_t seed, uint64_t epoch, bool shuffle) const override;

 private:
  const std::vector<uint64_t> shard_sizes_;
  std::vector<uint64_t> shard_starts_;  // first index of each shard; const after construction
  const uint64_t buffer_;
  uint64_t size_ = 0;  // const after construction
};

}  // namespace conveyor
