// ObjectCache: a node-local cache of remote objects on local disk (the
// daemon config's `cache` section, config/README.md): whole objects, each
// kept under its key (the object's URL without credentials or query:
// RedactUrl) and the validators the server gave for it (ETag,
// Last-Modified, size). A lookup whose validators differ from the entry's
// is a miss: the caller fetches the object again and Put replaces the entry,
// so a changed object is never served stale.
//
// On disk: one file per entry, `<dir>/<16 hex digits of the key's hash>.obj`,
// holding the object's bytes, then the key and validators, then a footer
// (sizes, a 64-bit checksum of the bytes, a magic number). Put writes a
// temporary file (`<dir>/tmp.*`), fsyncs it when `fsync` is on, and renames
// it over the entry's name once complete: a daemon killed mid-write leaves a
// temporary file, never an entry. Open scans the folder: temporary files are
// removed, and so is every entry whose footer, key, size or checksum does not
// match (a torn write after a power loss without fsync; a foreign file of
// that name). Reads check the footer, key and validators of the file they
// read (not the checksum: that costs a pass over the bytes; Open checks it).
//
// Budget: the bytes of all entries (data + metadata) stay within
// max_bytes; which entries are admitted and evicted is the eviction
// policy's (remote/cache_eviction.h).
//
// A full disk (ENOSPC, EDQUOT) turns the cache read-only for the rest of the
// process (logged once): entries already in are still served, nothing new
// is written, and reads never fail because of the cache. Other write errors
// skip the entry (logged, throttled).
//
// Thread-safety: every method may be called concurrently from any thread;
// disk I/O runs outside the cache's mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/base/unique_fd.h"
#include "remote/cache_eviction.h"
#include "remote/object_validators.h"

namespace conveyor::remote {

struct CacheOptions {
  std::string dir;  // "" = no cache
  uint64_t max_bytes = 0;
  CacheEvictionKind eviction = CacheEvictionKind::kFixedSubset;
  // fsync each entry before its rename (and the folder after). Off: a power
  // loss may tear entries written just before it; Open's checksum removes
  // them. A killed daemon loses nothing either way (the page cache stays).
  bool fsync = false;
};

// Writes the bytes of a cache file: the seam where tests inject a full disk.
class CacheFileWriter {
 public:
  virtual ~CacheFileWriter() = default;
  // All of `bytes` to `fd` at its current offset; a PosixError on failure.
  virtual absl::Status Write(int fd, std::span<const uint8_t> bytes) const;
};

class ObjectCache {
 public:
  // Makes `options.dir` (and its parents) if missing, takes its lock (an
  // flock on `<dir>/lock`, held while the cache lives; FailedPrecondition
  // when another process holds it: one daemon per folder), scans it (see
  // above). REQUIRES: options.dir non-empty. `writer` null: plain write(2).
  static absl::StatusOr<std::shared_ptr<ObjectCache>> Open(
      const CacheOptions& options, std::shared_ptr<const CacheFileWriter> writer = nullptr);

  // True and *out = the object's bytes when an entry for `key` with exactly
  // these validators is there (counted as a hit); false otherwise (*out
  // unspecified; nothing counted).
  bool Get(std::string_view key, const ObjectValidators& v, std::vector<uint8_t>* out);
  // As Get, for bytes [offset, offset + length) of the object only (three
  // preads: the footer, the key and validators, the range). False too when
  // the range is not within the object.
  bool GetRange(std::string_view key, const ObjectValidators& v, uint64_t offset, uint64_t length,
                std::vector<uint8_t>* out);
  // Whether any entry for `key` is held (whatever its validators).
  bool Contains(std::string_view key) const;
  // Records that the server declared version `v` of `key` fresh until
  // `until_ns` (MonotonicNanos; remote/http_freshness.h), if that version is
  // held. In memory only: after a restart every entry is revalidated once.
  void MarkFresh(std::string_view key, const ObjectValidators& v, uint64_t until_ns);
  // The validators of `key`'s entry while it is fresh at `now_ns` (then it
  // may be served without asking the server); nullopt otherwise.
  std::optional<ObjectValidators> FreshValidators(std::string_view key, uint64_t now_ns) const;
  // The validators of the entry held for `key`, if any (for entries whose
  // key says all that identifies them: a lookup without knowing the size).
  std::optional<ObjectValidators> ValidatorsOf(std::string_view key) const;
  // Keeps `bytes` as the object `key` with validators `v` (replacing an
  // older entry of the key), if the policy admits it and the disk takes it.
  // REQUIRES: bytes.size() == v.size.
  void Put(std::string_view key, const ObjectValidators& v, std::span<const uint8_t> bytes);
  // Counts `reads` that the cache did not serve, served by one fetch of
  // `network_bytes`.
  void CountMiss(uint64_t reads, uint64_t network_bytes);

  struct Counters {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes_from_cache = 0;
    uint64_t bytes_from_network = 0;
    uint64_t evictions = 0;
    uint64_t fills = 0;  // entries written
    uint64_t bytes_held = 0;
    uint64_t entries = 0;
    uint64_t removed_at_start = 0;  // temporary and corrupt files
    bool read_only = false;         // the disk was full
  };
  Counters counters() const;
  const CacheOptions& options() const { return options_; }

  ObjectCache(const CacheOptions& options, std::shared_ptr<const CacheFileWriter> writer);

 private:
  struct Entry {
    std::string file;  // name in dir
    ObjectValidators validators;
    uint64_t file_bytes = 0;
    uint64_t fresh_until_ns = 0;  // MarkFresh; 0: revalidate at every read
  };
  absl::Status Scan();
  // The file and size of the entry under `key` with validators `v`; false
  // when there is none (or only another version).
  bool FindEntry(std::string_view key, const ObjectValidators& v, std::string* file,
                 uint64_t* file_bytes) const ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes and renames the entry's file; false when not written.
  bool WriteEntry(const std::string& key, const ObjectValidators& v, std::span<const uint8_t> bytes,
                  const std::string& file);

  const CacheOptions options_;
  const std::shared_ptr<const CacheFileWriter> writer_;
  UniqueFd lock_;  // the folder's flock; set by Open

  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<CacheEviction> eviction_ ABSL_GUARDED_BY(mu_);
  uint64_t held_ ABSL_GUARDED_BY(mu_) = 0;  // file bytes of entries_
  // Bytes of Puts writing now (admitted, counted against the budget).
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  uint64_t temp_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

// The bytes' checksum that entries record (64-bit, not cryptographic).
uint64_t CacheChecksum(std::span<const uint8_t> bytes);

}  // namespace conveyor::remote
