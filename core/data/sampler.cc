// Epoch permutation and per-rank sharding. See sampler.h for the rule.
#include "core/data/sampler.h"

#include <sys/mman.h>

#include <cerrno>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/rng.h"
#include "core/base/status_macros.h"

namespace conveyor {
namespace {

// Third key of the sampler's Rng, so the shuffle stream never coincides with
// another user of Rng::ForKeys(seed, epoch, ...). Changing it changes every
// shuffle order (the golden test in sampler_test.cc pins it).
constexpr uint64_t kShuffleTag = 0x53414d504c455231ull;  // "SAMPLER1"

// P in `order` (n entries of T, wide enough for n - 1): identity, then
// Fisher-Yates from the back when shuffling. The one definition of the order
// whatever T is.
template <typename T>
void FillPermutation(T* order, uint64_t n, uint64_t seed, uint64_t epoch, bool shuffle) {
  for (uint64_t i = 0; i < n; ++i) order[i] = static_cast<T>(i);
  if (!shuffle || n < 2) return;
  // Position i takes a uniform pick of [0, i].
  Rng rng = Rng::ForKeys(seed, epoch, kShuffleTag);
  for (uint64_t i = n - 1; i > 0; --i) {
    const uint64_t j = rng.Below(i + 1);
    std::swap(order[i], order[j]);
  }
}

// The transient permutation of RankIndices: n entries of T in an anonymous
// mapping of its own, so that its pages go back to the kernel when it is
// destroyed. Freed through malloc, a permutation below glibc's mmap
// threshold (up to 32 MiB: 4M samples) stayed in the planning thread's arena
// for good — 10 MiB per stream at ImageNet size. Owns the mapping (RAII).
template <typename T>
class MappedArray {
 public:
  static absl::StatusOr<MappedArray> Create(uint64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return PosixError(absl::StrCat("mapping the epoch permutation of ", n, " samples"), errno);
    }
    return MappedArray(static_cast<T*>(p), bytes);
  }
  MappedArray(MappedArray&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(o.bytes_) {}
  MappedArray& operator=(MappedArray&&) = delete;
  MappedArray(const MappedArray&) = delete;
  ~MappedArray() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  T* data() const { return data_; }

 private:
  MappedArray(T* data, size_t bytes) : data_(data), bytes_(bytes) {}
  T* data_;
  size_t bytes_;
};

// The rank's indices into `indices` (values of type Out) with P held as T
// (4 bytes a sample when N fits in 32 bits).
template <typename T, typename Out>
absl::Status RankIndicesWith(const SamplerOptions& o, std::vector<Out>* indices) {
  ASSIGN_OR_RETURN(MappedArray<T> permutation, MappedArray<T>::Create(o.dataset_size));
  FillPermutation(permutation.data(), o.dataset_size, o.seed, o.epoch, o.shuffle);
  const uint64_t count = SamplesPerRank(o);
  indices->reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t position = o.offset + RankPosition(o.rank, o.world_size, k);
    // IndexAtPosition's rule
    indices->push_back(static_cast<Out>(permutation.data()[position % o.dataset_size]));
  }
  return absl::OkStatus();
}

// The rank's indices from a dataset's own order (tar shards).
template <typename Out>
void RankIndicesFromOrder(const SamplerOptions& o, std::vector<Out>* indices) {
  const std::vector<uint64_t> permutation = o.order->Permutation(o.seed, o.epoch, o.shuffle);
  const uint64_t count = SamplesPerRank(o);
  indices->reserve(count);
  for (uint64_t k = 0; k < count; ++k) {
    indices->push_back(static_cast<Out>(
        IndexAtPosition(permutation, o.offset + RankPosition(o.rank, o.world_size, k))));
  }
}

bool FitsUint32(uint64_t dataset_size) {
  return dataset_size <= uint64_t{std::numeric_limits<uint32_t>::max()} + 1;
}

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
    return absl::InvalidArgumentError(absl::StrCat("SamplerOptions.drop_last with dataset_size (",
                                                   o.dataset_size, ") < world_size (", o.world_size,
                                                   ") leaves every rank without samples"));
  }
  if (o.order != nullptr && o.order->size() != o.dataset_size) {
    return absl::InvalidArgumentError(absl::StrCat("SamplerOptions.order permutes ",
                                                   o.order->size(), " samples, not dataset_size (",
                                                   o.dataset_size, ")"));
  }
  if (o.offset >= o.dataset_size) {
    return absl::OutOfRangeError(
        absl::StrCat("resume offset (", o.offset, ") is at or past the end of the epoch (",
                     o.dataset_size, " samples): resume at the next epoch with offset 0"));
  }
  if (o.drop_last && o.dataset_size - o.offset < o.world_size) {
    return absl::OutOfRangeError(
        absl::StrCat("resume offset (", o.offset, ") leaves ", o.dataset_size - o.offset,
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
  FillPermutation(order.data(), dataset_size, seed, epoch, shuffle);
  return order;
}

absl::StatusOr<std::vector<uint64_t>> RankIndices(const SamplerOptions& o) {
  if (absl::Status s = ValidateSamplerOptions(o); !s.ok()) return s;
  std::vector<uint64_t> indices;
  if (o.order != nullptr) {
    // A dataset's own order (tar shards): its permutation as it gives it.
    RankIndicesFromOrder(o, &indices);
  } else if (FitsUint32(o.dataset_size)) {
    RETURN_IF_ERROR(RankIndicesWith<uint32_t>(o, &indices));
  } else {
    RETURN_IF_ERROR(RankIndicesWith<uint64_t>(o, &indices));
  }
  return indices;
}

void RankPlan::CopyTo(size_t k, std::span<uint64_t> out) const {
  for (size_t i = 0; i < out.size(); ++i) out[i] = (*this)[k + i];
}

absl::StatusOr<RankPlan> PlanRank(const SamplerOptions& o) {
  if (absl::Status s = ValidateSamplerOptions(o); !s.ok()) return s;
  RankPlan plan;
  if (!FitsUint32(o.dataset_size)) {
    ASSIGN_OR_RETURN(plan.wide_, RankIndices(o));
  } else if (o.order != nullptr) {
    RankIndicesFromOrder(o, &plan.narrow_);
  } else {
    RETURN_IF_ERROR(RankIndicesWith<uint32_t>(o, &plan.narrow_));
  }
  // An empty narrow_ means "use wide_": a plan of no samples is empty both ways.
  return plan;
}

}  // namespace conveyor
