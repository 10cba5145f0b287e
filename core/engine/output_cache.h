// OutputCache: the output of a deterministic pipeline (one that draws
// nothing random: RandomDraws() in core/decode/transform_spec.h), sample by
// sample, so that epochs after the first fetch and decode nothing
// (`cache_output: true`, config/README.md).
//
// An entry is one sample's final bytes — exactly what the decode stage
// writes into the sample's place in a batch slot (SampleBytes of the
// stream's transform) — under a key of everything those bytes depend on:
// the file's identity (SampleSource::Identity: path, size, mtime, inode; a
// tar member's shard, offset and size) followed by the fingerprint of the
// transform (TransformFingerprint: every field of the TransformSpec, the
// dtype a stream collates to included). The key is kept whole, not hashed
// down, so two different samples can never share an entry; a reload that
// changes a field of the transform changes every key. The label and the
// dataset index are not cached: the stream writes them from its dataset,
// which the file's identity does not decide.
//
// Bounded: the bytes held (values, keys and a fixed overhead per entry,
// Bytes()) never exceed the capacity; an insert that would exceed it evicts
// the least recently used entries first, and an entry larger than the whole
// capacity is not kept. Memory only: the daemon's worst case counts the
// capacity (config/README.md, "Memory: the worst case").
//
// Below it, optionally, an OutputStore (core/engine/output_store.h): the
// node's cache on disk. Every insert is also put there; a lookup that
// misses in memory asks it, and what it finds is kept in memory again. So
// output outlives the daemon and is shared by every pipeline with the same
// transform over the same files.
//
// Thread-safety: safe for concurrent use without external synchronization;
// every worker of the engine's pool calls it. The lock covers only the map
// and list updates: values are immutable buffers handed out as
// shared_ptr<const>, so a hit is copied into its slot after the lock is
// released, and evicted buffers are freed after it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/base/mutex.h"
#include "core/decode/transform_spec.h"
#include "core/engine/output_store.h"

namespace conveyor {

// Every field of `spec` that the decoded output may depend on, written
// exactly (floats by their bits), prefixed by a format version: equal specs
// give equal strings, and a change to any field changes the string.
std::string TransformFingerprint(const TransformSpec& spec);

class OutputCache {
 public:
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

  // Bookkeeping per entry counted on top of its key and value bytes (the
  // map node, the LRU node, the buffer's control block).
  static constexpr uint64_t kEntryOverheadBytes = 160;

  struct Stats {
    uint64_t capacity_bytes = 0;
    uint64_t bytes = 0;    // held now: values, keys and kEntryOverheadBytes each
    uint64_t entries = 0;  // held now
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t inserts = 0;     // entries added (a duplicate insert is no insert)
    uint64_t evictions = 0;   // entries dropped to make room
    uint64_t refused = 0;     // inserts larger than the whole capacity
    uint64_t store_hits = 0;  // of hits: found in the store, not in memory
  };

  // `store` may be null (memory only).
  explicit OutputCache(uint64_t capacity_bytes, std::shared_ptr<OutputStore> store = nullptr)
      : capacity_bytes_(capacity_bytes), store_(std::move(store)) {}
  OutputCache(const OutputCache&) = delete;
  OutputCache& operator=(const OutputCache&) = delete;

  // The bytes cached under `key` (now the most recently used entry), or
  // null; counts a hit or a miss. A miss in memory asks the store.
  Bytes Lookup(std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // Caches `value` under `key` (and puts it in the store), evicting least
  // recently used entries until it fits. Keeps the entry there if `key` is
  // already cached (the same deterministic output); keeps nothing in memory
  // when the entry alone is larger than the capacity. REQUIRES: value !=
  // nullptr.
  void Insert(std::string key, Bytes value) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t capacity_bytes() const { return capacity_bytes_; }
  const std::shared_ptr<OutputStore>& store() const { return store_; }
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

  // What an entry costs against the capacity.
  static uint64_t EntryBytes(size_t key_bytes, size_t value_bytes) {
    return key_bytes + value_bytes + kEntryOverheadBytes;
  }

 private:
  struct Entry {
    Bytes value;
    std::list<std::string>::iterator lru;  // its key's place in lru_
    uint64_t cost = 0;                     // EntryBytes
  };

  // In memory only (the store's entry came from there).
  void Keep(std::string key, Bytes value) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- constant after construction
  const uint64_t capacity_bytes_;
  const std::shared_ptr<OutputStore> store_;  // may be null

  // ---- guarded by mu_
  mutable Mutex mu_;
  // Keys by recency, most recent first; the map's keys are views into it
  // (list nodes never move).
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string_view, Entry> entries_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor
