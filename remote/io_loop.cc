// The remote reader's I/O thread (RemoteReader::Impl, remote/remote_reader_impl.h):
// it takes submitted requests into per-host queues, starts them within each
// host's connection and rate limits, waits on the epoll driver for ready
// sockets, hands finished transfers to Conclude (retry with backoff, or
// settle), and at the end fails whatever is left.
#include <pthread.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/engine/stats.h"
#include "remote/remote_reader_impl.h"
#include "remote/s3_url.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

// The longest the I/O thread sleeps without looking at its queues.
constexpr uint64_t kMaxWaitNs = 100'000'000;
// With transfers in flight and no read waiting for one, the I/O thread
// wakes at most once per this long, so the sockets that became ready meanwhile
// are served in one go: a wake per answer (and per prefetch hint) was two
// context switches per image taken from the decoders. Prefetched reads are
// hundreds ahead of need, so a millisecond more on them costs nothing; a read
// that waits (Claim) ends the pause at once.
constexpr uint64_t kWakeGapNs = 2'000'000;
// libcurl's connection cache holds this many times the per-host limit.
constexpr long kIdleConnectionsPerHostLimit = 4;
// Warnings about a host's limit dropping: at most one per host this often.
constexpr uint64_t kLimitWarningGapNs = 10'000'000'000ull;
// The I/O thread's name (at most 15 characters).
constexpr char kIoThreadName[] = "remote-io";

}  // namespace

RemoteReader::Impl::Impl(const RemoteOptions& options, const S3Config& s3)
    : options_(options), s3_(s3) {
  policy_.max_attempts = std::max<uint32_t>(1, options.max_attempts);
  policy_.initial_ns = uint64_t{options.initial_backoff_ms} * 1'000'000;
  policy_.max_ns =
      std::max<uint64_t>(policy_.initial_ns, uint64_t{options.max_backoff_ms} * 1'000'000);
  direct_enabled_ = options.direct_http && !ProxyConfigured();
}

absl::Status RemoteReader::Impl::Start() {
  multi_.reset(curl_multi_init());
  if (multi_ == nullptr) return absl::InternalError("curl_multi_init failed");
  RETURN_IF_ERROR(
      CurlMultiError("curl_multi_setopt(CURLMOPT_MAX_HOST_CONNECTIONS)",
                     curl_multi_setopt(multi_.get(), CURLMOPT_MAX_HOST_CONNECTIONS,
                                       static_cast<long>(options_.max_connections_per_host))));
  // Idle connections kept for reuse: libcurl's default (4 per easy handle in
  // the multi handle) shrinks its cache whenever few transfers are in flight,
  // so every burst after a lull connected again (~110 new connections per
  // stream of 4000 images in the HTTP benchmark).
  RETURN_IF_ERROR(CurlMultiError("curl_multi_setopt(CURLMOPT_MAXCONNECTS)",
                                 curl_multi_setopt(multi_.get(), CURLMOPT_MAXCONNECTS,
                                                   static_cast<long>(kIdleConnectionsPerHostLimit) *
                                                       options_.max_connections_per_host)));
  absl::StatusOr<std::unique_ptr<CurlEpollDriver>> driver = CurlEpollDriver::Create(multi_.get());
  if (!driver.ok()) return driver.status();
  driver_ = *std::move(driver);
  if (direct_enabled_) direct_ = MakeHttp1DirectPath(driver_.get(), options_);
  thread_ = std::thread([this] { Loop(); });
  // A name of its own, so its CPU can be told apart (top -H, /proc/PID/task/*/comm).
  pthread_setname_np(thread_.native_handle(), kIoThreadName);
  return absl::OkStatus();
}

RemoteReader::Impl::~Impl() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (driver_ != nullptr) driver_->Wake();
  if (thread_.joinable()) thread_.join();
  RunReadyCompletions();  // asynchronous reads the I/O thread failed on its way out
  direct_.reset();
  driver_.reset();
  idle_easy_.clear();
  multi_.reset();
}

void RemoteReader::Impl::Loop() {
  std::mt19937_64 rng(std::random_device{}());
  uint64_t last_sweep_ns = MonotonicNanos();
  uint64_t last_wake_ns = 0;
  std::vector<DirectHttpPath::Outcome> direct_done;
  while (true) {
    std::vector<RequestPtr> fresh;
    std::vector<RequestPtr> claimed;
    bool pause = false;
    bool busy = false;
    {
      MutexLock lock(&mu_);
      if (stopping_) break;
      fresh.swap(submissions_);
      claimed.swap(claimed_first_);
      io_busy_ = busy = InFlight() > 0;
      pause = busy && claims_waiting_ == 0;
    }
    const uint64_t now = MonotonicNanos();
    for (RequestPtr& r : fresh) HostFor(r->host).queue.push_back(std::move(r));
    // Reads that wait go before the read-ahead (a run's part is not queued
    // itself: its run keeps its place).
    for (const RequestPtr& r : claimed) {
      std::deque<RequestPtr>& q = HostFor(r->host).queue;
      const auto it = std::find(q.begin(), q.end(), r);
      if (it == q.end() || it == q.begin()) continue;
      q.erase(it);
      q.push_front(r);
    }
    // Retries whose wait is over go back to their host's queue.
    for (size_t i = 0; i < delayed_.size();) {
      if (delayed_[i]->not_before_ns <= now) {
        HostFor(delayed_[i]->host).queue.push_front(delayed_[i]);
        delayed_[i] = delayed_.back();
        delayed_.pop_back();
      } else {
        ++i;
      }
    }
    uint64_t wake_ns = now + kMaxWaitNs;
    for (auto& [name, h] : hosts_) {
      StartQueued(&h, now, &wake_ns);
      PublishGauges(name, h);
    }
    for (const RequestPtr& r : delayed_) wake_ns = std::min(wake_ns, r->not_before_ns);
    if (direct_ != nullptr) wake_ns = std::min(wake_ns, direct_->NextDeadline());
    if (!busy && InFlight() > 0) {
      MutexLock lock(&mu_);
      io_busy_ = true;
    }

    // Waits for ready sockets, libcurl's timer, a submission or wake_ns,
    // and lets libcurl act on the sockets that are ready.
    if (pause && last_wake_ns + kWakeGapNs > now) {
      driver_->Pause(std::min(wake_ns, last_wake_ns + kWakeGapNs));
    }
    driver_->Drive(wake_ns);
    last_wake_ns = MonotonicNanos();
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_.get(), &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      Finished(msg->easy_handle, msg->data.result, &rng);
    }
    if (direct_ != nullptr) {
      direct_done.clear();
      direct_->TakeFinished(MonotonicNanos(), &direct_done);
      for (DirectHttpPath::Outcome& o : direct_done) FinishedDirect(o, &rng);
    }
    if (const uint64_t t = MonotonicNanos(); t - last_sweep_ns > 1'000'000'000ull) {
      DropUnclaimed(t);
      last_sweep_ns = t;
    }
  }
  // Stopping: fail whatever is left so no reader waits forever.
  std::vector<RequestPtr> left_over;
  for (auto& [easy, r] : active_) {
    RemoveFromMulti(multi_.get(), easy);
    left_over.push_back(r);
  }
  active_.clear();
  if (direct_ != nullptr) {
    for (RequestPtr& r : direct_->Abandon()) left_over.push_back(std::move(r));
  }
  for (auto& [name, h] : hosts_) left_over.insert(left_over.end(), h.queue.begin(), h.queue.end());
  left_over.insert(left_over.end(), delayed_.begin(), delayed_.end());
  MutexLock lock(&mu_);
  left_over.insert(left_over.end(), submissions_.begin(), submissions_.end());
  claimed_first_.clear();  // (each is in left_over already)
  const uint64_t now = MonotonicNanos();
  for (const RequestPtr& r : left_over) {
    ReleaseEasy(r.get());  // (the I/O thread's pool; still this thread)
    const absl::Status stopped =
        absl::CancelledError(absl::StrCat("reading ", r->name, ": the reader stopped"));
    if (r->parts.empty()) {
      Settle(r, Unshared(stopped), now);
    } else {
      for (const RequestPtr& part : r->parts) Settle(part, Unshared(stopped), now);
      r->done = true;
      r->parts.clear();
    }
  }
  left_over.clear();  // before the readers wake (see Complete)
  cv_.SignalAll();
}

void RemoteReader::Impl::StartQueued(Host* h, uint64_t now, uint64_t* wake_ns) {
  const double rate = options_.requests_per_second_per_host;
  if (rate > 0) {
    const double burst = std::max(1.0, rate / 10);
    if (h->refilled_ns == 0) h->refilled_ns = now;
    h->tokens = std::min(burst, h->tokens + (now - h->refilled_ns) * 1e-9 * rate);
    h->refilled_ns = now;
  }
  while (!h->queue.empty() && h->active < h->concurrency.limit()) {
    if (rate > 0 && h->tokens < 1) {
      *wake_ns = std::min(*wake_ns, now + static_cast<uint64_t>((1 - h->tokens) / rate * 1e9) + 1);
      return;
    }
    if (rate > 0) h->tokens -= 1;
    RequestPtr r = std::move(h->queue.front());
    h->queue.pop_front();
    if (StartTransfer(r)) ++h->active;
  }
  // Requests wait for a place: the host's limit is what holds them.
  if (!h->queue.empty()) h->concurrency.OnLimited();
}

RemoteReader::Impl::Host& RemoteReader::Impl::HostFor(const std::string& name) {
  auto [it, fresh] = hosts_.try_emplace(name);
  if (fresh) {
    it->second.concurrency =
        HostConcurrency(options_.max_connections_per_host, options_.adaptive_connections);
  }
  return it->second;
}

void RemoteReader::Impl::PublishGauges(const std::string& name, const Host& h) {
  host_stats_.Update(name, [&](HostStats* s) {
    s->in_flight = h.active;
    s->queued = h.queue.size();
    s->connection_limit = h.concurrency.limit();
    s->max_connections = options_.max_connections_per_host;
    s->limit_decreases = h.concurrency.decreases();
    s->adaptive = options_.adaptive_connections;
  });
}

void RemoteReader::Impl::EndAttempt(const Request& r, const AttemptEnd& end) {
  const uint64_t now = MonotonicNanos();
  Host& h = HostFor(r.host);
  const uint32_t before = h.concurrency.limit();
  const bool slow = end.connect_ns >= HostConcurrency::kSlowConnectNs;
  const bool dropped =
      end.congestion ? h.concurrency.OnCongestion(r.started_ns, now)
                     : h.concurrency.OnAnswer(r.started_ns, end.first_byte_ns, end.connect_ns);
  host_stats_.Update(r.host, [&](HostStats* s) {
    s->RecordAttempt(end.status, now - std::min(now, r.started_ns), r.received);
    if (end.connect_failed) ++s->connect_failures;
    if (slow) ++s->slow_connects;
  });
  // Said at most once per host every kLimitWarningGapNs: the lowering is
  // visible in the stats and metrics meanwhile.
  if (dropped && (h.warned_ns == 0 || now - h.warned_ns >= kLimitWarningGapNs)) {
    h.warned_ns = now;
    const char* why = slow                 ? "a connect took over 0.9 s (its listen backlog full?)"
                      : end.connect_failed ? "a connection failed"
                      : end.status != 0    ? "it answered 503/429"
                                           : "a transfer failed (reset, timed out, no answer)";
    spdlog::warn(
        "remote: host {}: {}; transfers in flight lowered from {} to {} (lowered {} times so "
        "far; remote.adaptive_connections)",
        EscapeText(r.host), why, before, h.concurrency.limit(), h.concurrency.decreases());
  }
}

bool RemoteReader::Impl::StartTransfer(const RequestPtr& r) {
  ReleaseEasy(r.get());
  r->body.clear();
  r->received = 0;
  r->cursor = 0;
  for (const RequestPtr& part : r->parts) part->body.clear();  // (a retry)
  r->status_seen = false;
  r->range_ignored = false;
  r->enough = false;
  r->too_large = false;
  r->range_checked = false;
  r->answer_error.clear();
  const auto size = known_sizes_.find(r->full_url);
  r->known_size = size != known_sizes_.end() ? size->second : 0;
  r->http_status = 0;
  ++r->attempt;
  r->started_ns = MonotonicNanos();
  if (!r->target.empty() && !r->head) {
    if (direct_ != nullptr && direct_->TryStart(r)) {
      CountStart();
      return true;
    }
  }
  if (absl::Status st = StartCurl(r); !st.ok()) {
    // libcurl could not take it (out of memory, most likely): an error of
    // the system, not retried here (the engine retries it).
    RequestPtr failed = r;
    Complete(failed, MarkSystemError(absl::UnavailableError(
                         absl::StrCat(r->head ? "HEAD " : "GET ", r->name, ": ", st.message()))));
    return false;
  }
  return true;
}

size_t RemoteReader::Impl::InFlight() const {
  return active_.size() + (direct_ != nullptr ? direct_->in_flight() : 0);
}

// A transfer of the direct path ended: judged like libcurl's, or sent again
// through libcurl (the path gave its host up), as the same attempt.
void RemoteReader::Impl::FinishedDirect(DirectHttpPath::Outcome& o, std::mt19937_64* rng) {
  RequestPtr r = std::move(o.request);
  Host& h = HostFor(r->host);
  --h.active;
  if (o.to_libcurl) {
    --r->attempt;
    h.queue.push_front(std::move(r));
    return;
  }
  const bool failed = !o.transport_error.empty();
  AttemptEnd end;
  end.status = failed ? 0 : r->http_status;
  const uint64_t now = MonotonicNanos();
  end.first_byte_ns = now - std::min(now, r->started_ns);  // (the path tells no first byte)
  end.congestion = failed || IsCongestionStatus(end.status);
  EndAttempt(*r, end);
  Conclude(r, o.transport_error, /*retryable=*/failed, rng);
}

void RemoteReader::Impl::CountStart() {
  requests_started_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t n = InFlight();
  if (n > max_in_flight_.load(std::memory_order_relaxed)) {
    max_in_flight_.store(n, std::memory_order_relaxed);
  }
}

// The status of a request that failed for good (`what` says how): an error
// of the system (the engine retries the read, then ends the stream), or
// with remote.failed_object: sample, an error of the object's sample when
// `host` answers: it has answered some request, and no other object has
// failed since its last answer (a host that fails everything is down).
absl::Status RemoteReader::Impl::FailedForGood(const Host& host, std::string what) const {
  if (options_.failed_object == RemoteOptions::FailedObject::kSample && host.answered &&
      !host.several_failing) {
    absl::StrAppend(&what,
                    " (the host answers other objects: an error of this sample, "
                    "remote.failed_object)");
    return absl::UnavailableError(what);
  }
  return MarkSystemError(absl::UnavailableError(what));
}

// Judges a transfer's end: `transport_error` says why no answer came ("" =
// one did: r->http_status and the body), `retryable` whether that is worth
// another attempt. Retries it, or settles it (Complete).
void RemoteReader::Impl::Conclude(RequestPtr& r, const std::string& transport_error, bool retryable,
                                  std::mt19937_64* rng) {
  const char* verb = r->head ? "HEAD " : "GET ";
  if (r->enough) return Complete(r, absl::OkStatus());
  if (r->too_large) {
    return Complete(r, absl::ResourceExhaustedError(
                           r->length == kWhole
                               ? absl::StrCat(r->name, " is larger than ", r->max_bytes,
                                              " bytes (max_file_bytes)")
                               : absl::StrCat(verb, r->name, ": HTTP 206 answer longer than the ",
                                              r->length, " bytes asked")));
  }
  const bool failed = !transport_error.empty();
  const bool retry_transport = failed && retryable;
  const bool retry_http = !failed && IsRetryableHttpStatus(r->http_status);
  Host& host = HostFor(r->host);
  if (failed || retry_http) {
    // One object failing while the host answers others, or several.
    if (host.failing_key.empty()) {
      host.failing_key = r->key;
    } else if (host.failing_key != r->key) {
      host.several_failing = true;
    }
  } else {
    host.answered = true;
    host.failing_key.clear();
    host.several_failing = false;
  }
  if (retry_transport || retry_http) {
    r->last_error = retry_transport ? transport_error : absl::StrCat("HTTP ", r->http_status);
    if (r->attempt < policy_.max_attempts) {
      retries_.fetch_add(1, std::memory_order_relaxed);
      host_stats_.Update(r->host, [](HostStats* s) { ++s->retries; });
      r->not_before_ns = MonotonicNanos() + policy_.DelayNs(r->attempt, (*rng)());
      ReleaseEasy(r.get());
      delayed_.push_back(std::move(r));
      return;
    }
    return Complete(
        r,
        FailedForGood(host, absl::StrCat(verb, r->name, ": host ", EscapeText(r->host), " failed ",
                                         r->attempt, " attempts, the last with: ", r->last_error)));
  }
  if (failed) {
    return Complete(
        r, FailedForGood(host, absl::StrCat(verb, r->name, ": host ", EscapeText(r->host), ": ",
                                            transport_error)));
  }
  const long s = r->http_status;
  if (s >= 400) {
    std::string what = absl::StrCat(verb, r->name, ": HTTP ", s);
    if (const std::string c = S3ErrorCode(r->body); !c.empty()) absl::StrAppend(&what, " ", c);
    absl::StrAppend(&what, " from ", EscapeText(r->host));
    switch (s) {
      case 404:
      case 410: return Complete(r, absl::NotFoundError(what));
      case 401:
      case 403: return Complete(r, absl::PermissionDeniedError(what));
      case 416:
        return Complete(r, absl::OutOfRangeError(absl::StrCat(what, " (range past the end)")));
      default: return Complete(r, absl::FailedPreconditionError(what));
    }
  }
  if (s >= 300) {
    return Complete(r, absl::FailedPreconditionError(absl::StrCat(
                           verb, r->name, ": HTTP ", s, " (redirects are not followed)")));
  }
  // (A short run fails only the parts it did not cover: Complete.)
  if (!r->head && r->length != kWhole && r->received != r->length && r->parts.empty()) {
    return Complete(r, absl::OutOfRangeError(absl::StrCat(
                           verb, r->name, ": bytes [", r->offset, ", ", r->offset + r->length,
                           ") asked, the object holds only ", r->received, " of them")));
  }
  Complete(r, absl::OkStatus());
}

}  // namespace conveyor::remote
