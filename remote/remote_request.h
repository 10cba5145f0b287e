// Request: one read of the remote reader (a HEAD, a range, a whole object, or
// a run of ranges fetched with one GET) as it goes from a reader thread to
// the I/O thread and back, and the few helpers on it shared by the reader's
// files (remote_reader.cc, read_ahead.cc, io_loop.cc, curl_transfer.cc,
// direct_http_path.cc). Internal to remote/.
//
// Thread-safety: a Request is handed between threads as the comments on its
// fields say: the fields marked "constant" never change after creation, the
// I/O thread's fields belong to it while !done, and the rest are guarded by
// the reader's mutex. The functions are pure or act on the Request they are
// given only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <curl/curl.h>

#include "absl/status/status.h"
#include "core/data/pending_read.h"
#include "remote/curl_handles.h"
#include "remote/http1_client.h"

namespace conveyor::remote {

// A length meaning "the whole object".
inline constexpr uint64_t kWhole = UINT64_MAX;

struct Request {
  // Constant after creation.
  std::string key;       // object + range: the read-ahead map's key
  std::string name;      // RedactUrl(object): for messages
  std::string full_url;  // what libcurl fetches
  std::string host;      // host[:port]: the unit of the per-host limits
  std::string target;    // plain http: the direct client's request target ("" = libcurl only)
  bool s3 = false;
  bool head = false;
  uint64_t offset = 0;
  uint64_t length = kWhole;  // kWhole: the whole object
  uint64_t max_bytes = kWhole;

  // The I/O thread's while !done (then the claimant's, under the reader's mutex).
  UniqueCurlEasy easy;               // in the multi handle while libcurl transfers it
  std::unique_ptr<Http1Get> direct;  // the direct client's transfer (kept for retries)
  UniqueCurlSlist headers;           // the transfer's extra headers (S3), while it runs
  std::vector<uint8_t> body;
  uint64_t received = 0;  // bytes of the range (or object) taken so far
  // What received (a run's part: its body's size) was at the last chunk,
  // for PendingRead::progress on any thread. Written by the I/O thread only.
  std::atomic<uint64_t> progress{0};
  size_t cursor = 0;  // a run: the part the next bytes may belong to
  long http_status = 0;
  bool status_seen = false;
  bool range_ignored = false;  // 200 to a Range request: cut the range out
  uint64_t skip = 0;           // bytes still to skip when range_ignored
  bool enough = false;         // the range is complete; the transfer was stopped
  bool too_large = false;
  // The object's size when the I/O thread knows it (an earlier HEAD); 0: not.
  uint64_t known_size = 0;
  bool range_checked = false;  // libcurl: a 206's Content-Range was checked
  // The answer is not the one asked (a 206 for another range): a cut
  // answer, retried like one (ContentRangeMismatch says why).
  std::string answer_error;
  uint32_t attempt = 0;     // attempts made
  uint64_t started_ns = 0;  // the attempt's start (MonotonicNanos)
  uint64_t not_before_ns = 0;
  std::string last_error;
  uint64_t size = 0;  // HEAD: Content-Length
  // HEAD: the answer's ETag and Last-Modified ("" when absent), for the
  // object cache's validators (RemoteReader::StatAsync).
  std::string etag;
  std::string last_modified;
  // HEAD: the answer's Cache-Control (fields joined with ", ") and Age
  // ("" when absent), for how long it stays fresh (remote/http_freshness.h).
  std::string cache_control;
  std::string age;
  // A run (PrefetchRun): the part requests (ascending, not overlapping) its
  // bytes go to as they arrive, each into its part's body (the bytes between
  // parts are dropped). Each part is in the read-ahead map, is claimed and
  // settled as a prefetch of its own, and is never submitted itself.
  std::vector<std::shared_ptr<Request>> parts;

  // Guarded by the reader's mutex.
  bool done = false;
  bool claimed = false;
  absl::Status status;
  uint64_t done_ns = 0;
  // An asynchronous read's (ReadRangeAsync, ReadWholeAsync) completion and
  // where its bytes go; settling the request hands the body to *out and
  // queues `on_done` to run once the mutex is released. Empty for a
  // synchronous read (it waits on the reader's condition variable) and once
  // the read was cancelled (its bytes are then dropped with the request).
  ReadDone on_done;
  std::vector<uint8_t>* out = nullptr;
};

using RequestPtr = std::shared_ptr<Request>;

// The read-ahead map's key of a read: the object, the range, HEAD or GET.
std::string RequestKey(bool head, uint64_t offset, uint64_t length, std::string_view object);

// A copy of `s` that shares nothing with it (a new message and payloads):
// each request's status is then freed with the request by whoever drops it
// last, however many threads copied the original.
absl::Status Unshared(const absl::Status& s);

// Takes the next bytes of r's range: into its body, or for a run into the
// parts they fall in; updates `progress`. The I/O thread's.
void Store(Request* r, std::string_view chunk);

}  // namespace conveyor::remote
