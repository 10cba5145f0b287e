// RemoteReader: a ByteRangeReader over HTTP(S) and S3 (s3://bucket/key,
// signed with AWS Signature V4 by libcurl) that runs every transfer on one
// I/O thread of its own through libcurl's multi interface, driven by its
// socket interface on epoll (remote/curl_epoll_driver.h), so hundreds of
// requests can be in flight while no worker thread is held by any but the
// reads that really wait, and a wake costs what the ready sockets cost.
//
//  - Per host: at most its connection limit of transfers at once (adaptive,
//    AIMD, up to max_connections_per_host: remote/host_concurrency.h; fixed
//    at max_connections_per_host with remote.adaptive_connections off) and
//    at most requests_per_second_per_host started per second; the rest
//    queue. What each host did is counted (host_stats(), remote/host_stats.h).
//  - Failures worth retrying (5xx, 429, refused/reset connections,
//    timeouts: remote/backoff.h) are retried up to max_attempts with
//    exponential backoff and jitter. Then the read fails with UNAVAILABLE
//    naming the host, marked as an error of the system (IsSystemError), so
//    the engine retries it and then ends the stream; with
//    remote.failed_object: sample, unmarked (an error of the sample) while
//    the host answers other objects. A 4xx answer (404
//    missing, 403 forbidden) is an error of the sample (NotFound,
//    PermissionDenied, ...) naming the object.
//  - Ranges: "Range: bytes=a-b". A 206 must name the range asked (and the
//    size an earlier HEAD gave) in its Content-Range, else it is a cut
//    answer, retried, its bytes never served; a
//    server that ignores Range (200 with the whole object) is handled: the
//    range is cut out of the stream and the transfer stopped after it.
//  - Read-ahead: Prefetch / PrefetchWhole start a request now; its bytes are
//    kept until the matching read claims them. PrefetchRun fetches several
//    ranges of one object (a tar shard's neighbouring members) with one
//    request and keeps each range for its read. New prefetches are refused
//    while the bytes kept plus those on their way (estimated from the
//    average object) reach read_ahead_bytes; bytes nobody claims are
//    dropped after kUnclaimedTtl.
//  - With remote.direct_http (off by default), plain http:// GETs (runs
//    too; not HEAD; no proxy in the environment) go through the direct path
//    (remote/direct_http_path.h: the reader's own HTTP/1.1 client) once
//    libcurl has fetched one object from the host: to the address libcurl
//    reached it at (for a minute, then libcurl resolves it again), with the
//    body received straight into the read's buffer (a run's: into each
//    part's). A host that sends an answer that client leaves to libcurl
//    (chunked, a 200 to a Range, ...) is libcurl's from then on; the request
//    is sent again there, as the same attempt.
//  - Messages name objects by RedactUrl (no user:password, no query) and
//    never hold a credential.
//
// remote.io_threads I/O threads (default 1) share the work, each object
// always on the same one. They are named "remote-io" (their CPU can be told
// apart). The work
// is split over the files listed in remote/remote_reader_impl.h.
//
//  - Asynchronous reads claim their request as a synchronous one does, and
//    instead of waiting attach their completion to it (under the reader's
//    mutex); the I/O thread settles the request, hands the body over and
//    runs the completion once the mutex is released. Cancel detaches the
//    completion and runs it with CANCELLED; the transfer goes on and its
//    bytes are dropped when it ends.
//
// Thread-safety: every method may be called concurrently from any thread.
// Destruction stops the I/O thread; reads still waiting fail (CANCELLED),
// asynchronous ones through their completion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/byte_range_reader.h"
#include "remote/host_stats.h"
#include "remote/object_validators.h"
#include "remote/remote_options.h"
#include "remote/s3_credentials.h"

namespace conveyor::remote {

class RemoteReader final : public ByteRangeReader {
 public:
  // Starts the I/O thread. `s3` says where s3:// URLs go (ResolveS3Config).
  static absl::StatusOr<std::shared_ptr<RemoteReader>> Create(const RemoteOptions& options,
                                                              const S3Config& s3);
  ~RemoteReader() override;
  RemoteReader(const RemoteReader&) = delete;
  RemoteReader& operator=(const RemoteReader&) = delete;

  absl::StatusOr<uint64_t> Size(std::string_view object) const override;
  absl::Status ReadRange(std::string_view object, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override;
  // Reads wait on the network: sources over this reader are read with
  // ReadRangeAsync / ReadWholeAsync, whose `done` runs on the I/O thread
  // once the bytes are there (or on the thread that cancels), never under
  // the reader's lock.
  bool reads_asynchronously() const override { return true; }
  std::shared_ptr<PendingRead> ReadRangeAsync(std::string_view object, uint64_t offset,
                                              uint64_t length, std::vector<uint8_t>* out,
                                              ReadDone done) const override;
  bool Prefetch(std::string_view object, uint64_t offset, uint64_t length) const override;
  // One GET for neighbouring parts (gaps up to 64 KiB, at most 16 MiB a
  // request; further apart, a request each), cut into one read-ahead entry
  // per part on arrival: each part is then claimed by its ReadRange as a
  // prefetch of its own, and counts against the read-ahead budget as one.
  bool PrefetchRun(std::string_view object, std::span<const Range> parts) const override;

  // Replaces *out with the whole object; larger than max_bytes is an error
  // of the object (ResourceExhausted naming it).
  absl::Status ReadWhole(std::string_view object, uint64_t max_bytes,
                         std::vector<uint8_t>* out) const;
  // As ReadWhole, asynchronously (see ReadRangeAsync and
  // core/data/pending_read.h): null when done already ran.
  std::shared_ptr<PendingRead> ReadWholeAsync(std::string_view object, uint64_t max_bytes,
                                              std::vector<uint8_t>* out, ReadDone done) const;
  // Starts reading the whole object for a ReadWhole to come. False when the
  // read-ahead budget is spent (nothing started; try later).
  bool PrefetchWhole(std::string_view object, uint64_t max_bytes) const;

  // HEADs `object` and sets *out to its size, ETag and Last-Modified ("" when
  // the answer has none), then runs `done` (as ReadRangeAsync's; *out is the
  // read's until then). For the object cache's revalidation. A HEAD sent
  // ahead by PrefetchStat is used if its answer is at most 1 s old, else
  // sent again. `done` may run after a Cancel of the returned handle (when
  // the HEAD was sent again): it must ignore a result that comes late.
  std::shared_ptr<PendingRead> StatAsync(std::string_view object, ObjectValidators* out,
                                         ReadDone done) const;

  // Starts the HEAD of a StatAsync to come (the object cache's revalidation,
  // sent with the read-ahead). False when the read-ahead budget is spent.
  bool PrefetchStat(std::string_view object) const;

  struct Counters {
    uint64_t requests_started = 0;  // attempts, retries included
    uint64_t retries = 0;
    uint64_t prefetch_hits = 0;    // reads served by a prefetch (done or in flight)
    uint64_t readahead_bytes = 0;  // kept now
    uint64_t max_in_flight = 0;    // the most transfers at once so far (summed over I/O threads)
    uint64_t direct_requests = 0;  // attempts made by the direct HTTP/1.1 client
  };
  Counters counters() const;
  // What the reader did with each host it has read from (sorted by host;
  // the I/O threads' figures summed): remote/host_stats.h.
  std::vector<HostStats> host_stats() const;

 private:
  class Impl;
  explicit RemoteReader(std::vector<std::unique_ptr<Impl>> impls);
  // The I/O thread's state that reads `object` (one of impls_, by its hash).
  const Impl& ImplFor(std::string_view object) const;
  const std::vector<std::unique_ptr<Impl>> impls_;  // one per I/O thread
};

// The reader the daemon plugs into sources (URL lists, tar shards): S3
// settings resolved from `options` and the environment.
absl::StatusOr<std::shared_ptr<RemoteReader>> MakeRemoteRangeReader(const RemoteOptions& options);

}  // namespace conveyor::remote
