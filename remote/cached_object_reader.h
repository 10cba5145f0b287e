// CachedObjectReader: whole-object reads of a RemoteReader through the
// node-local ObjectCache (remote/object_cache.h), for URL datasets.
//
// Each read revalidates at open: a HEAD of the object gives its validators
// (ETag, Last-Modified, size); an entry of the object's key (RedactUrl: no
// credentials, no query) with exactly those validators is served from disk
// and no body is requested. Otherwise the object is fetched with one GET,
// stored under the HEAD's validators, and served. (Should the object change
// between the HEAD and the GET, the newer bytes are stored under the older
// validators; the next HEAD names the newer version, so that entry is never
// served again: nothing stale is served.) A HEAD that fails with an error
// of the system (the host is down, after its retries) is the read's error;
// any other failure (a server without HEAD) falls back to an uncached GET,
// whose answer decides.
//
// Freshness (RFC 9111): when the HEAD's answer declares the object fresh
// (Cache-Control s-maxage or max-age, less its Age; not with no-cache or
// no-store: remote/http_freshness.h), the entry is served without a HEAD
// until that lifetime ends (counted from a second before the answer was
// used), and no HEAD is sent ahead for it. That is the server's own word
// that the version stays current; objects without it are revalidated at
// every read.
//
// Concurrent misses of one object version — from any stream of any pipeline
// sharing this reader's cache — are one GET: the first starts it, the others
// wait on it and each gets a copy of its bytes (`fills` counts the GETs).
//
// Where it runs: the HEAD's completion, and with it a hit's read from local
// disk (one pread of the entry's file) and a fill's write, run on the remote
// reader's I/O thread; reads never hold a worker.
//
// Thread-safety: every method may be called concurrently from any thread.
// REQUIRES: the remote reader outlives every read started (the source that
// owns this reader keeps it alive while the engine holds a read's handle).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/mutex.h"
#include "core/data/pending_read.h"
#include "remote/object_cache.h"
#include "remote/remote_reader.h"

namespace conveyor::remote {

class CachedObjectReader {
 public:
  // REQUIRES: reader and cache non-null.
  CachedObjectReader(std::shared_ptr<const RemoteReader> reader,
                     std::shared_ptr<ObjectCache> cache);

  // As RemoteReader::ReadWholeAsync, through the cache.
  std::shared_ptr<PendingRead> ReadWholeAsync(std::string_view object, uint64_t max_bytes,
                                              std::vector<uint8_t>* out, ReadDone done) const;
  // Read-ahead for a read to come: its HEAD (RemoteReader::PrefetchStat),
  // and for objects the cache holds no entry of, the GET too
  // (RemoteReader::PrefetchWhole); nothing for an object being fetched for
  // a read now. False when the read-ahead budget is spent.
  bool PrefetchWhole(std::string_view object, uint64_t max_bytes) const;

  const std::shared_ptr<ObjectCache>& cache() const { return cache_; }
  // GETs started to fill the cache (one per concurrent miss of a version).
  uint64_t fills() const;

  struct Flight;
  struct State;

 private:
  const std::shared_ptr<const RemoteReader> reader_;
  const std::shared_ptr<ObjectCache> cache_;
  const std::shared_ptr<State> state_;
};

}  // namespace conveyor::remote
