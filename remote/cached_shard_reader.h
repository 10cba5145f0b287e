// CachedShardReader: a ByteRangeReader over a RemoteReader for remote tar
// shards (dataset.shards URLs) through the node-local ObjectCache
// (remote/object_cache.h), whole shard by whole shard.
//
// A member read revalidates its shard: a HEAD (RemoteReader::StatAsync)
// gives the shard's validators, at most once a second per shard (reads of
// the same shard within a second of its last HEAD use that answer). A shard
// held with those validators serves the member's range from disk (three
// preads). Otherwise the range is read from the network as without a cache,
// and the whole shard is fetched once in the background (one GET; at most
// kMaxFills shards at once, each held in memory until written) and kept, so
// the shard's later reads come from disk. Hints (Prefetch, PrefetchRun) are
// dropped for shards held and fresh, passed on otherwise.
//
// Thread-safety: every method may be called concurrently from any thread.
// REQUIRES: as CachedObjectReader's (the remote reader outlives the reads).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/mutex.h"
#include "core/data/byte_range_reader.h"
#include "remote/object_cache.h"
#include "remote/remote_reader.h"

namespace conveyor::remote {

class CachedShardReader final : public ByteRangeReader {
 public:
  // Whole-shard fetches in flight at most (each holds its shard in memory).
  static constexpr size_t kMaxFills = 2;

  // Shards larger than `max_shard_bytes` are not cached. REQUIRES: non-null.
  CachedShardReader(std::shared_ptr<const RemoteReader> reader, std::shared_ptr<ObjectCache> cache,
                    uint64_t max_shard_bytes);

  absl::StatusOr<uint64_t> Size(std::string_view object) const override;
  absl::Status ReadRange(std::string_view object, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override;
  bool reads_asynchronously() const override { return true; }
  std::shared_ptr<PendingRead> ReadRangeAsync(std::string_view object, uint64_t offset,
                                              uint64_t length, std::vector<uint8_t>* out,
                                              ReadDone done) const override;
  bool Prefetch(std::string_view object, uint64_t offset, uint64_t length) const override;
  bool PrefetchRun(std::string_view object, std::span<const Range> parts) const override;

  const std::shared_ptr<const RemoteReader>& remote() const { return reader_; }
  const std::shared_ptr<ObjectCache>& cache() const { return cache_; }

  struct State;

 private:
  // Whether `key` is held with validators checked within the last second.
  bool HeldAndFresh(const std::string& key) const;

  const std::shared_ptr<const RemoteReader> reader_;
  const std::shared_ptr<ObjectCache> cache_;
  const uint64_t max_shard_bytes_;
  const std::shared_ptr<State> state_;
};

}  // namespace conveyor::remote
