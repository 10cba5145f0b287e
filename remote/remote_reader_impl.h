// RemoteReader::Impl: the state of one remote reader, shared by the files
// that each do one part of its work (internal to remote/):
//   remote_reader.cc    the public methods, and a read's Request (URL → what is fetched)
//   read_ahead.cc       claims, prefetches and runs, the read-ahead budget,
//                       settling a finished request for the reader that waits
//   io_loop.cc          the I/O thread: queues, per-host limits, retries, the epoll wait
//   curl_transfer.cc    a transfer through libcurl: easy handles, options, the body
//   direct_http_path.cc the direct HTTP/1.1 path (remote/direct_http_path.h), when on
// with remote_request.h (the Request), s3_url.h (S3 addressing) and
// curl_handles.h (libcurl's owners and error helper).
//
// Thread-safety: the members under "the I/O thread's own" and the methods
// that start, drive or finish transfers (Loop down to Conclude) belong to the
// I/O thread; mu_ guards the fields marked ABSL_GUARDED_BY; the public-facing
// methods (Claim, Await, AwaitAsync, Prefetch, PrefetchRun, counters) may be called from
// any thread. See remote/remote_reader.h.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <curl/curl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "remote/backoff.h"
#include "remote/curl_epoll_driver.h"
#include "remote/curl_handles.h"
#include "remote/direct_http_path.h"
#include "remote/host_concurrency.h"
#include "remote/host_stats.h"
#include "remote/remote_reader.h"
#include "remote/remote_request.h"
#include "remote/url.h"

namespace conveyor::remote {

// curl_multi_remove_handle, its failure (a handle not in `multi`: a bug)
// logged (curl_transfer.cc).
void RemoveFromMulti(CURLM* multi, CURL* easy);

class RemoteReader::Impl {
 public:
  Impl(const RemoteOptions& options, const S3Config& s3);
  ~Impl();
  // Makes the multi handle and the epoll driver, starts the I/O thread.
  absl::Status Start();

  // A new request for a read of `object` (not submitted).
  absl::StatusOr<RequestPtr> NewRequest(std::string_view object, uint64_t offset, uint64_t length,
                                        uint64_t max_bytes, bool head) const;
  // Waits for `r` (already submitted or prefetched) and hands over its result.
  absl::Status Await(const RequestPtr& r, std::vector<uint8_t>* out, uint64_t* size) const;
  // Attaches an asynchronous read's completion to `r` (already submitted or
  // prefetched), or, when r is done, hands its result over and runs `done`
  // at once (then returns null). The handle cancels and reports progress.
  std::shared_ptr<PendingRead> AwaitAsync(const RequestPtr& r, std::vector<uint8_t>* out,
                                          ReadDone done) const;
  // Claims a prefetched request for the read, or submits a new one.
  absl::StatusOr<RequestPtr> Claim(std::string_view object, uint64_t offset, uint64_t length,
                                   uint64_t max_bytes, bool head) const;
  // Starts a read for a claim to come; false when the read-ahead budget is spent.
  // (`head`: a HEAD of the object, for StatAsync; it weighs as an average
  // object against the budget while on its way.)
  bool Prefetch(std::string_view object, uint64_t offset, uint64_t length, uint64_t max_bytes,
                bool head = false) const;
  // One request for parts [first, last] of `object` (ascending, close together).
  bool PrefetchRun(std::string_view object, std::span<const ByteRangeReader::Range> parts) const;
  Counters counters() const;
  // This I/O thread's hosts (any thread).
  std::vector<HostStats> host_stats() const { return host_stats_.Snapshot(); }

 private:
  // The I/O thread's state of one host.
  struct Host {
    std::deque<RequestPtr> queue;
    uint32_t active = 0;
    double tokens = 1;
    uint64_t refilled_ns = 0;
    // Whether the host answers (remote.failed_object: sample): it has given
    // an answer that was not retried, and since the last such answer, the
    // one object whose attempts failed (its request key) or several.
    bool answered = false;
    std::string failing_key;
    bool several_failing = false;
    // Transfers allowed in flight now (set by HostFor).
    HostConcurrency concurrency{1, false};
    uint64_t warned_ns = 0;  // the last warning about its limit dropping
  };
  // What one attempt's end says about its host's congestion.
  struct AttemptEnd {
    long status = 0;             // the answer's HTTP status; 0: none
    uint64_t first_byte_ns = 0;  // start to the first byte of the answer
    uint64_t connect_ns = 0;     // the connect's time (0: a connection reused)
    bool congestion = false;     // refused/reset/timed out/no answer, 503, 429
    bool connect_failed = false;
  };

  // io_loop.cc: a host's state, made on first use.
  Host& HostFor(const std::string& name);
  // Accounts an attempt of `r` that ended: the host's stats and limit.
  void EndAttempt(const Request& r, const AttemptEnd& end);
  // Publishes h's gauges (in flight, queued, limit) to host_stats_.
  void PublishGauges(const std::string& name, const Host& h);

  // io_loop.cc: the I/O thread.
  void Loop();
  void StartQueued(Host* h, uint64_t now, uint64_t* wake_ns);
  // False when the request could not be started (it is settled already).
  bool StartTransfer(const RequestPtr& r);
  void CountStart();
  size_t InFlight() const;  // transfers of both clients
  void FinishedDirect(DirectHttpPath::Outcome& o, std::mt19937_64* rng);
  void Conclude(RequestPtr& r, const std::string& transport_error, bool retryable,
                std::mt19937_64* rng);
  // A request failed for good: an error of the system or (remote.failed_object)
  // of its sample, by what `host` has answered.
  absl::Status FailedForGood(const Host& host, std::string what) const;

  // curl_transfer.cc: transfers through libcurl.
  // An error (the request is not started) when libcurl refuses the handle.
  absl::Status StartCurl(const RequestPtr& r);
  absl::StatusOr<UniqueCurlEasy> AcquireEasy();
  void ReleaseEasy(Request* r);
  void Finished(CURL* easy, CURLcode code, std::mt19937_64* rng);

  // read_ahead.cc: settling finished requests, the read-ahead map.
  void Complete(RequestPtr& r, absl::Status status);
  // Settles r; an asynchronous read's completion goes to done_ready_.
  bool Settle(const RequestPtr& r, absl::Status status, uint64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs the completions Settle queued. Called after settling, without mu_.
  void RunReadyCompletions() const ABSL_LOCKS_EXCLUDED(mu_);
  // The handle of an asynchronous read (read_ahead.cc).
  class Pending;
  void DropUnclaimed(uint64_t now);

  const RemoteOptions options_;
  const S3Config s3_;
  BackoffPolicy policy_;
  bool direct_enabled_ = false;  // plain GETs get a request target (set by the constructor)
  UniqueCurlMulti multi_;
  std::unique_ptr<CurlEpollDriver> driver_;
  std::thread thread_;

  // The I/O thread's own.
  std::map<std::string, Host> hosts_;
  std::unordered_map<CURL*, RequestPtr> active_;
  std::vector<RequestPtr> delayed_;        // retries waiting for their time
  std::vector<UniqueCurlEasy> idle_easy_;  // easy handles kept for reuse (AcquireEasy)
  // Object sizes learnt from HEAD answers, by URL fetched (at most
  // kMaxKnownSizes): a 206 must come from an object of that size.
  std::unordered_map<std::string, uint64_t> known_sizes_;
  // The direct path (remote.direct_http and no proxy); null when off. Made
  // before the thread starts.
  std::unique_ptr<DirectHttpPath> direct_;

  // Per-host figures, recorded by the I/O thread, read by any.
  HostStatsTable host_stats_;
  mutable std::atomic<uint64_t> requests_started_{0};
  mutable std::atomic<uint64_t> retries_{0};
  mutable std::atomic<uint64_t> prefetch_hits_{0};
  mutable std::atomic<uint64_t> max_in_flight_{0};

  mutable Mutex mu_;
  mutable CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::vector<RequestPtr> submissions_ ABSL_GUARDED_BY(mu_);
  // Claimed requests not done: moved to the front of their host's queue
  // when still waiting there (not started yet).
  mutable std::vector<RequestPtr> claimed_first_ ABSL_GUARDED_BY(mu_);
  // Prefetched requests not claimed yet, by key.
  mutable std::unordered_map<std::string, RequestPtr> pending_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t readahead_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // done, unclaimed
  mutable uint64_t prefetch_inflight_ ABSL_GUARDED_BY(mu_) = 0;  // started, not done, unclaimed
  mutable uint64_t avg_object_bytes_ ABSL_GUARDED_BY(mu_) = 128 << 10;
  // Completions of asynchronous reads whose request was settled, to run
  // once mu_ is released (RunReadyCompletions), with their status.
  mutable std::vector<std::pair<ReadDone, absl::Status>> done_ready_ ABSL_GUARDED_BY(mu_);
  // Claimed requests not done yet: a reader waits (or is about to) for each.
  mutable uint64_t claims_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // The I/O thread has transfers in flight, so it will look at submissions
  // again soon without being woken (set by the I/O thread).
  bool io_busy_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace conveyor::remote
