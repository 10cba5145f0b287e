// CacheEviction: which entries the object cache (remote/object_cache.h)
// admits and which it evicts to stay within its byte budget. One small
// interface, two policies:
//
//  - kLru: admit everything, evict the least recently used entries until the
//    new one fits. On epoch-style scans of a dataset larger than the cache it
//    evicts exactly the objects the next epoch reads first: its hit rate
//    falls to about zero (bench/README.md, "Object cache eviction").
//  - kFixedSubset (the default): keep what is in, admit a new entry only
//    while there is room; nothing is evicted for room (an entry leaves only
//    when it is replaced, found stale or corrupt). On repeated scans a cache
//    of a fraction f of the dataset then serves a fraction f of every epoch.
//
// Thread-safety: none; the cache calls it under its own mutex.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace conveyor::remote {

enum class CacheEvictionKind { kFixedSubset, kLru };

class CacheEviction {
 public:
  virtual ~CacheEviction() = default;
  // An entry of `bytes` is in the cache (inserted, or found at start).
  virtual void Added(const std::string& key, uint64_t bytes) = 0;
  // The entry was read (a hit).
  virtual void Touched(const std::string& key) = 0;
  // The entry left the cache (evicted, replaced, stale or corrupt).
  virtual void Removed(const std::string& key) = 0;
  // Whether a new entry of `bytes` may come in while `used` of `budget`
  // bytes are held; if so, the cache evicts Victim()s until it fits.
  virtual bool Admit(uint64_t bytes, uint64_t used, uint64_t budget) const = 0;
  // The entry to evict next for room; nullopt: none.
  virtual std::optional<std::string> Victim() const = 0;
};

std::unique_ptr<CacheEviction> MakeCacheEviction(CacheEvictionKind kind);

}  // namespace conveyor::remote
