// The shard-local epoch permutation. See shard_order.h for the rule.
#include "core/data/shard_order.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/base/rng.h"

namespace conveyor {
namespace {

// Third keys of the two Rng streams (distinct from the global sampler's).
// Changing them changes every order (shard_order_test pins one).
constexpr uint64_t kShardTag = 0x5348415244523031ull;   // "SHARDR01"
constexpr uint64_t kBufferTag = 0x5348554642463031ull;  // "SHUFBF01"

}  // namespace

ShardOrder::ShardOrder(std::vector<uint64_t> shard_sizes, uint64_t buffer)
    : shard_sizes_(std::move(shard_sizes)), buffer_(buffer) {
  shard_starts_.reserve(shard_sizes_.size());
  for (const uint64_t n : shard_sizes_) {
    shard_starts_.push_back(size_);
    size_ += n;
  }
}

std::vector<uint64_t> ShardOrder::Permutation(uint64_t seed, uint64_t epoch, bool shuffle) const {
  std::vector<uint64_t> out;
  out.reserve(size_);
  if (!shuffle) {
    out.resize(size_);
    std::iota(out.begin(), out.end(), uint64_t{0});
    return out;
  }
  std::vector<uint64_t> shards(shard_sizes_.size());
  std::iota(shards.begin(), shards.end(), uint64_t{0});
  Rng shard_rng = Rng::ForKeys(seed, epoch, kShardTag);
  for (uint64_t i = shards.size(); i > 1; --i) {
    std::swap(shards[i - 1], shards[shard_rng.Below(i)]);
  }
  Rng rng = Rng::ForKeys(seed, epoch, kBufferTag);
  const uint64_t capacity = buffer_ < 1 ? 1 : buffer_;
  std::vector<uint64_t> buffer;
  buffer.reserve(std::min(capacity, size_));
  for (const uint64_t s : shards) {
    for (uint64_t i = shard_starts_[s], end = i + shard_sizes_[s]; i < end; ++i) {
      if (buffer.size() < capacity) {
        buffer.push_back(i);
        if (capacity > 1) continue;
      }
      if (capacity == 1) {
        out.push_back(buffer.back());
        buffer.pop_back();
        continue;
      }
      const uint64_t j = rng.Below(capacity);
      out.push_back(buffer[j]);
      buffer[j] = i;
    }
  }
  while (!buffer.empty()) {
    const uint64_t j = rng.Below(buffer.size());
    out.push_back(buffer[j]);
    buffer[j] = buffer.back();
    buffer.pop_back();
  }
  return out;
}

}  // namespace conveyor
