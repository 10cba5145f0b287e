// CachedOutputStore: the OutputStore (core/engine/output_store.h) of a
// pipeline with `cache_output` in a daemon with a `cache` section: sample
// output kept as entries of the node-local object cache (remote/
// object_cache.h), so it outlives the daemon, is shared by every pipeline
// and job of the node, counts in `cache.max_bytes` and follows its eviction
// and crash safety like remote objects.
//
// An entry's key is "conveyor-output:" followed by the SHA-256, in hex, of
// the output cache's key (the file's identity and the transform's
// fingerprint, which may hold any byte and be long); its validators are a
// tag of this format and the size.
//
// Thread-safety: as ObjectCache's (any thread, concurrently).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine/output_store.h"
#include "remote/object_cache.h"

namespace conveyor::remote {

// The object cache key of output cached under `output_key`.
std::string OutputEntryKey(std::string_view output_key);

class CachedOutputStore final : public OutputStore {
 public:
  // REQUIRES: cache non-null.
  explicit CachedOutputStore(std::shared_ptr<ObjectCache> cache) : cache_(std::move(cache)) {}
  bool Get(std::string_view key, std::vector<uint8_t>* out) override;
  void Put(std::string_view key, std::span<const uint8_t> bytes) override;
  const std::shared_ptr<ObjectCache>& cache() const { return cache_; }

 private:
  const std::shared_ptr<ObjectCache> cache_;
};

}  // namespace conveyor::remote
