// The sampler: which dataset indices a stream (one rank of one job) reads in
// one epoch, and in what order. A pure function of SamplerOptions: the same
// options give the same order on every machine, compiler and library (the
// shuffle uses conveyor::Rng, never <random>'s distributions).
//
// The rule (the same as torch.utils.data.DistributedSampler, with our own
// shuffle):
//   N = dataset_size, W = world_size, r = rank.
//   1. P = EpochPermutation(N, seed, epoch, shuffle): identity when !shuffle,
//      else a Fisher-Yates shuffle driven by Rng::ForKeys(seed, epoch, kTag).
//      P is the same for every rank.
//   2. The epoch order G has T = W * SamplesPerRank positions:
//      - drop_last = false: SamplesPerRank = ceil(N / W) and G[p] = P[p mod N]:
//        the order wraps around to the start of P, so the first T - N samples
//        of P (the padding) appear twice in the epoch (more often when N < W:
//        P is repeated as many times as needed).
//      - drop_last = true:  SamplesPerRank = floor(N / W) and G[p] = P[p] for
//        p < T: the last N mod W samples of P are left out of this epoch (a
//        different set every epoch when shuffled, the tail of the dataset when
//        not).
//   3. Rank r takes positions r, r + W, r + 2W, ...: its k-th sample sits at
//      global position k * W + r (RankPosition) and is G[k * W + r].
// So every rank gets exactly SamplesPerRank samples (hence the same number of
// batches), ranks are disjoint when drop_last or N is a multiple of W, and
// together they cover the dataset (except the dropped tail) every epoch.
// Global positions are what a resume point records: they do not depend on
// batch size and stay meaningful when the world size changes.
//
// Resume and elastic resume (offset > 0): when the ranks together already
// consumed the first `offset` samples of P (offset = the global position
// reached, capped at N), the rest of the epoch is P[offset .. N) dealt out
// the same way: G'[i] = P[(offset + i) mod N] for i < W' * SamplesPerRank,
// SamplesPerRank = ceil((N - offset) / W') (padding wraps to the start of P)
// or floor((N - offset) / W') with drop_last. At the same world size this is
// exactly the continuation of the uninterrupted epoch (rank r's k-th sample
// of the rest is its (offset / W + k)-th of the whole); at another world size
// W' the rest is delivered once across the new ranks (plus the documented
// padding or minus the dropped tail when N - offset is not a multiple of W').
//
// Another permutation P (step 1) may come with the dataset (EpochOrder, e.g.
// the shard-local order of tar shards, core/data/shard_order.h): steps 2 and 3 and
// the resume rule apply to it unchanged.
//
// Thread-safety: free functions without shared state; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace conveyor {

// A dataset's own epoch permutation P, replacing EpochPermutation (step 1).
// Thread-safety: implementations are immutable; Permutation is safe
// concurrently.
class EpochOrder {
 public:
  virtual ~EpochOrder() = default;
  // The number of samples it permutes (must equal the dataset's size).
  virtual uint64_t size() const = 0;
  // A permutation of [0, size()), a pure function of its arguments.
  virtual std::vector<uint64_t> Permutation(uint64_t seed, uint64_t epoch, bool shuffle) const = 0;
};

struct SamplerOptions {
  uint64_t dataset_size = 0;  // N, > 0
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint32_t rank = 0;        // r, < world_size
  uint32_t world_size = 1;  // W, > 0
  bool shuffle = true;
  bool drop_last = false;  // REQUIRES (if true): dataset_size - offset >= world_size
  // Samples of the epoch order P already consumed by all ranks together
  // (resume); 0 for a fresh epoch. REQUIRES: offset < dataset_size.
  uint64_t offset = 0;
  // The epoch permutation P; null: EpochPermutation. Not owned; must outlive
  // the call. REQUIRES (if set): order->size() == dataset_size.
  const EpochOrder* order = nullptr;
};

// OK, or InvalidArgument naming the bad field: dataset_size 0, world_size 0,
// rank >= world_size, drop_last with dataset_size < world_size (every rank
// would get nothing); OutOfRange for offset >= dataset_size (the epoch is
// over: resume at the next epoch) or, with drop_last, fewer than world_size
// samples left after offset.
absl::Status ValidateSamplerOptions(const SamplerOptions& options);

// Samples each rank reads per epoch: ceil((N - offset) / W), or
// floor((N - offset) / W) with drop_last. REQUIRES: ValidateSamplerOptions(options).ok().
uint64_t SamplesPerRank(const SamplerOptions& options);

// Positions in one epoch over all ranks: world_size * SamplesPerRank.
// REQUIRES: ValidateSamplerOptions(options).ok().
uint64_t PositionsPerEpoch(const SamplerOptions& options);

// The global position of a rank's k-th sample in the epoch order: k * W + r.
inline uint64_t RankPosition(uint32_t rank, uint32_t world_size, uint64_t k) {
  return k * world_size + rank;
}

// The global epoch order P: a permutation of [0, dataset_size), identity when
// !shuffle. Identical on every machine. Costs 8 bytes per sample.
// (RankIndices builds the same P in a mapping of its own, 4 bytes per sample
// when N < 2^32, and unmaps it before returning: planning an epoch leaves
// only the rank's indices behind, never the whole permutation.)
std::vector<uint64_t> EpochPermutation(uint64_t dataset_size, uint64_t seed, uint64_t epoch,
                                       bool shuffle);

// The dataset index at global position `position` of the padded / truncated
// order G built from `permutation` (P): P[position mod N]. With an offset,
// G'[i] is IndexAtPosition(P, offset + i).
// REQUIRES: !permutation.empty(), position < PositionsPerEpoch of the options
// that produced it.
inline uint64_t IndexAtPosition(const std::vector<uint64_t>& permutation, uint64_t position) {
  return permutation[position % permutation.size()];
}

// This rank's indices for the epoch, in order: SamplesPerRank(options) values,
// the k-th being G[RankPosition(rank, world_size, k)] (G' with an offset).
// InvalidArgument when the options are invalid.
absl::StatusOr<std::vector<uint64_t>> RankIndices(const SamplerOptions& options);

// RankIndices as a stream keeps it for an epoch: 4 bytes an index when the
// dataset has at most 2^32 samples (ImageNet's 1.28 M: 1.25 MiB a rank at 4
// ranks instead of 2.5), else 8. Immutable; safe for concurrent reads.
class RankPlan {
 public:
  size_t size() const { return narrow_.empty() ? wide_.size() : narrow_.size(); }
  // REQUIRES: k < size().
  uint64_t operator[](size_t k) const { return narrow_.empty() ? wide_[k] : narrow_[k]; }
  // Indices [k, k + out.size()) into out. REQUIRES: k + out.size() <= size().
  void CopyTo(size_t k, std::span<uint64_t> out) const;
  // Heap bytes held.
  size_t MemoryBytes() const {
    return narrow_.capacity() * sizeof(uint32_t) + wide_.capacity() * sizeof(uint64_t);
  }

 private:
  friend absl::StatusOr<RankPlan> PlanRank(const SamplerOptions& options);
  std::vector<uint32_t> narrow_;  // the indices when they fit 32 bits (then wide_ is empty)
  std::vector<uint64_t> wide_;    // else
};

// The same indices as RankIndices(options), held as a RankPlan.
// InvalidArgument when the options are invalid.
absl::StatusOr<RankPlan> PlanRank(const SamplerOptions& options);

}  // namespace conveyor
