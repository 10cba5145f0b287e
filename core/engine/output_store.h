// OutputStore: a second tier below a pipeline's in-memory OutputCache
// (core/engine/output_cache.h), on disk, that outlives the daemon and is
// shared by every pipeline and job of the node: the daemon keeps it in its
// node-local object cache (remote/cached_output_store.h) when it has a
// `cache` section. The memory tier is asked first; a miss there asks the
// store, and a store hit is kept in memory again.
//
// Keys are the OutputCache's (the file's identity and the transform's
// fingerprint), so a store never serves output of other bytes or of another
// transform.
//
// Thread-safety: implementations are called concurrently from every worker
// thread of the engine, without the OutputCache's lock.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace conveyor {

class OutputStore {
 public:
  virtual ~OutputStore() = default;
  // True and *out = the bytes kept under `key`; false (*out unspecified)
  // when none are. Reads local disk.
  virtual bool Get(std::string_view key, std::vector<uint8_t>* out) = 0;
  // Keeps `bytes` under `key`, if the store has room for them. Writes local
  // disk; never fails the caller (a full disk keeps nothing more).
  virtual void Put(std::string_view key, std::span<const uint8_t> bytes) = 0;
};

}  // namespace conveyor
