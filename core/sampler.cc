// Epoch permutation and per-rank sharding. See sampler.h for the rule.
#include "core/sampler.h"

#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rng.h"

namespace conveyor {
namespace {

// Third key of the sampler's Rng, so the shuffle stream never coincides with
// another user of Rng::ForKeys(seed, epoch, ...). Changing it changes every
// shuffle order (the golden test in sampler_test.cc pins it).
constexpr uint64_t kShuffleTag = 0x53414d504c455231ull;  // "SAMPLER1"

}  // namespace

absl::Status ValidateSamplerOptions(const SamplerOptions& o) {
  if (o.dataset_size == 0) {
    return absl::InvalidArgumentError("SamplerOptions.dataset_size must be > 0 (empty dataset)");
  }
  if (o.world_size == 0) {
    return absl::InvalidArgumentError("SamplerOptions.world_size must be > 0");
  }
  if (o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("SamplerOptions.rank (", o.rank,
                                                   ") must be < world_size (", o.world_size, ")"));
  }
  if (o.drop_last && o.dataset_size < o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SamplerOptions.drop_last with dataset_size (", o.dataset_size, ") < world_size (",
        o.world_size, ") leaves every rank without samples"));
  }
  if (o.order != nullptr && o.order->size() != o.dataset_size) {
    return absl::InvalidArgumentError(absl::StrCat("SamplerOptions.order permutes ",
                                                   o.order->size(), " samples, not dataset_size (",
                                                   o.dataset_size, ")"));
  }
  if (o.offset >= o.dataset_size) {
    return absl::OutOfRangeError(absl::StrCat(
        "resume offset (", o.offset, ") is at or past the end of the epoch (", o.dataset_size,
        " samples): resume at the next epoch with offset 0"));
  }
  if (o.drop_last && o.dataset_size - o.offset < o.world_size) {
    return absl::OutOfRangeError(absl::StrCat(
        "resume offset (", o.offset, ") leaves ", o.dataset_size - o.offset,
        " samples, fewer than world_size (", o.world_size,
        ") with drop_last: the epoch is over, resume at the next epoch"));
  }
  return absl::OkStatus();
}

uint64_t SamplesPerRank(const SamplerOptions& o) {
  const uint64_t left = o.dataset_size - o.offset;
  const uint64_t floor = left / o.world_size;
  if (o.drop_last) return floor;
  return floor + (left % o.world_size != 0 ? 1 : 0);
}

uint64_t PositionsPerEpoch(const SamplerOptions& o) { return SamplesPerRank(o) * o.world_size; }

std::vector<uint64_t> EpochPermutation(uint64_t dataset_size, uint64_t seed, uint64_t epoch,
                                       bool shuffle) {
  std::vector<uint64_t> order(dataset_size);
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (!shuffle || dataset_size < 2) return order;
  // Fisher-Yates, from the back: position i takes a uniform pick of [0, i].
  Rng rng = Rng::ForKeys(seed, epoch, kShuffleTag);
  for (uint64_t i = dataset_size - 1; i > 0; --i) {
    const uint64_t j = rng.Below(i + 1);
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<std::vector<uint64_t>> RankIndices(const SamplerOptions& o) {
  if (absl::Status s = ValidateSamplerOptions(o); !s.ok()) return s;
  const std::vector<uint64_t> permutation =
      o.order != nullptr ? o.order->Permutation(o.seed, o.epoch, o.shuffle)
                         : EpochPermutation(o.dataset_size, o.seed, o.epoch, o.shuffle);
  const uint64_t count = SamplesPerRank(o);
  std::vector<uint64_t> indices;
  indices.reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    indices.push_back(
        IndexAtPosition(permutation, o.offset + RankPosition(o.rank, o.world_size, k)));
  }
  return indices;
}

}  // namespace conveyor
