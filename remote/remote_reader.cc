#include "remote/remote_reader.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>

#include <curl/curl.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/mutex.h"
#include "core/base/posix_error.h"
#include "core/base/text_escape.h"
#include "core/engine/stats.h"
#include "remote/backoff.h"
#include "remote/curl_epoll_driver.h"
#include "remote/http1_client.h"
#include "remote/url.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

constexpr uint64_t kWhole = UINT64_MAX;
// Prefetched bytes nobody claimed for this long are dropped (a stream that
// ended or moved on will not come for them).
constexpr uint64_t kUnclaimedTtlNs = 120'000'000'000ull;
// Prefetches kept at most, whatever their size.
constexpr size_t kMaxPending = 1u << 16;
// The longest the I/O thread sleeps without looking at its queues.
constexpr uint64_t kMaxWaitNs = 100'000'000;
// libcurl's receive buffer per transfer (its default is 16 KiB): an image of
// ~100 KiB that is all there arrives in one recv and one write callback, not
// seven of each.
constexpr long kReceiveBufferBytes = 128 << 10;
// With transfers in flight and no read waiting for one, the I/O thread
// wakes at most once per this long, so the sockets that became ready meanwhile
// are served in one go: a wake per answer (and per prefetch hint) was two
// context switches per image taken from the decoders. Prefetched reads are
// hundreds ahead of need, so a millisecond more on them costs nothing; a read
// that waits (Claim) ends the pause at once.
constexpr uint64_t kWakeGapNs = 2'000'000;
// PrefetchRun: parts further apart than this, or a run longer than
// kMaxRunBytes, start a new request (the bytes between parts are read and
// dropped, so a wide gap is cheaper as two requests).
constexpr uint64_t kMaxRunGapBytes = 64 << 10;
constexpr uint64_t kMaxRunBytes = 16 << 20;
// Easy handles kept for reuse (each holds its receive buffer and settings).
constexpr size_t kMaxIdleEasy = 512;
// How long the address libcurl reached a host at is used by the direct
// HTTP client (then the next request goes through libcurl, which resolves
// the name again): a name's address may move.
constexpr uint64_t kDirectAddressTtlNs = 60'000'000'000ull;
// Bytes of an error answer kept for the message (S3's <Code>).
constexpr size_t kMaxErrorBody = 4096;
// SHA-256 of an empty payload: S3 wants the payload hash in a header.
constexpr char kEmptySha256[] =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Percent-encodes an S3 key for the URL path (unreserved and '/' kept).
std::string EncodeKey(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

// scheme://host[:port] of an endpoint or URL → "host[:port]".
std::string AuthorityOf(std::string_view url) {
  const size_t sep = url.find("://");
  std::string_view rest = sep == std::string_view::npos ? url : url.substr(sep + 3);
  return std::string(rest.substr(0, rest.find_first_of("/?#")));
}

// S3's error code from an XML error body ("NoSuchKey"), or "".
std::string S3ErrorCode(const std::vector<uint8_t>& body) {
  const std::string_view b(reinterpret_cast<const char*>(body.data()), body.size());
  const size_t start = b.find("<Code>");
  if (start == std::string_view::npos) return "";
  const size_t end = b.find("</Code>", start);
  if (end == std::string_view::npos) return "";
  return EscapeText(b.substr(start + 6, std::min<size_t>(end - start - 6, 64)));
}

// A copy of `s` that shares nothing with it (a new message and payloads):
// each request's status is then freed with the request by whoever drops it
// last, however many threads copied the original.
absl::Status Unshared(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status copy(s.code(), std::string(s.message()));
  s.ForEachPayload([&copy](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

// The path and query of a plain http:// URL, as the direct client's request
// target, or "" when the URL is one for libcurl only (credentials in it, a
// fragment, bytes a request line cannot carry as they are).
std::string DirectTarget(std::string_view object, const ObjectUrl& url) {
  if (url.scheme != ObjectUrl::Scheme::kHttp || AuthorityOf(object) != url.authority) return "";
  if (url.path.empty() || url.path.front() != '/') return "";
  for (unsigned char c : url.path) {
    if (c <= 0x20 || c >= 0x7f || c == '#') return "";
  }
  return url.path;
}

// Whether the environment sends plain HTTP through a proxy (libcurl obeys
// these; the direct client does not speak to proxies).
bool ProxyConfigured() {
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return true;
  }
  return false;
}

// The read-ahead map's key of a read: the object, the range, HEAD or GET.
std::string RequestKey(bool head, uint64_t offset, uint64_t length, std::string_view object) {
  return absl::StrCat(head ? "H" : "G", offset, ":", length, ":", std::string(object));
}

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
  CURL* easy = nullptr;
  std::unique_ptr<Http1Get> direct;  // the direct client's transfer (kept for retries)
  curl_slist* headers = nullptr;
  std::vector<uint8_t> body;
  uint64_t received = 0;  // bytes of the range (or object) taken so far
  size_t cursor = 0;      // a run: the part the next bytes may belong to
  long http_status = 0;
  bool status_seen = false;
  bool range_ignored = false;  // 200 to a Range request: cut the range out
  uint64_t skip = 0;           // bytes still to skip when range_ignored
  bool enough = false;         // the range is complete; the transfer was stopped
  bool too_large = false;
  uint32_t attempt = 0;  // attempts made
  uint64_t not_before_ns = 0;
  std::string last_error;
  uint64_t size = 0;  // HEAD: Content-Length
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
};

using RequestPtr = std::shared_ptr<Request>;

// Takes the next bytes of r's range: into its body, or for a run into the
// parts they fall in.
void Store(Request* r, std::string_view chunk) {
  uint64_t at = r->offset + r->received;  // the object offset of chunk[0]
  r->received += chunk.size();
  if (r->parts.empty()) {
    r->body.insert(r->body.end(), chunk.begin(), chunk.end());
    return;
  }
  while (!chunk.empty() && r->cursor < r->parts.size()) {
    Request& part = *r->parts[r->cursor];
    const uint64_t part_end = part.offset + part.length;
    if (at >= part_end) {
      ++r->cursor;
    } else if (at < part.offset) {
      const size_t gap = static_cast<size_t>(std::min<uint64_t>(chunk.size(), part.offset - at));
      chunk.remove_prefix(gap);
      at += gap;
    } else {
      if (part.body.capacity() < part.length) part.body.reserve(static_cast<size_t>(part.length));
      const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk.size(), part_end - at));
      part.body.insert(part.body.end(), chunk.begin(),
                       chunk.begin() + static_cast<ptrdiff_t>(take));
      chunk.remove_prefix(take);
      at += take;
    }
  }
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  Request* r = static_cast<Request*>(user);
  const size_t len = size * n;
  if (!r->status_seen) {
    r->status_seen = true;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (r->http_status == 200 && r->length != kWhole) {
      r->range_ignored = true;
      r->skip = r->offset;
    }
    // One allocation for the body, not a doubling series of copies: the
    // range asked, else the announced length (at most the object limit).
    if (r->http_status < 300 && r->parts.empty()) {
      curl_off_t announced = -1;
      curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
      uint64_t want = r->length != kWhole ? r->length
                      : announced > 0     ? static_cast<uint64_t>(announced)
                                          : 0;
      want = std::min<uint64_t>(want, r->max_bytes);
      if (want > r->body.capacity()) r->body.reserve(static_cast<size_t>(want));
    }
  }
  if (r->http_status >= 300) {
    // An error document: keep its start for the message.
    const size_t keep = std::min(len, kMaxErrorBody - std::min(kMaxErrorBody, r->body.size()));
    r->body.insert(r->body.end(), data, data + keep);
    return len;
  }
  std::string_view chunk(data, len);
  if (r->range_ignored) {
    const size_t s = static_cast<size_t>(std::min<uint64_t>(r->skip, chunk.size()));
    chunk.remove_prefix(s);
    r->skip -= s;
  }
  const uint64_t limit = r->length != kWhole ? r->length : r->max_bytes;
  const uint64_t room = limit - std::min<uint64_t>(limit, r->received);
  if (chunk.size() > room) {
    Store(r, chunk.substr(0, static_cast<size_t>(room)));
    if (r->range_ignored) {
      r->enough = true;
    } else if (r->length == kWhole) {
      r->too_large = true;
    } else {
      // A 206 longer than the range asked: the server is broken.
      r->too_large = true;
    }
    return 0;  // stops the transfer
  }
  Store(r, chunk);
  if (r->range_ignored && r->received == r->length) {
    r->enough = true;
    return 0;
  }
  return len;
}

}  // namespace

class RemoteReader::Impl {
 public:
  Impl(const RemoteOptions& options, const S3Config& s3) : options_(options), s3_(s3) {
    policy_.max_attempts = std::max<uint32_t>(1, options.max_attempts);
    policy_.initial_ns = uint64_t{options.initial_backoff_ms} * 1'000'000;
    policy_.max_ns =
        std::max<uint64_t>(policy_.initial_ns, uint64_t{options.max_backoff_ms} * 1'000'000);
    s3_host_ = AuthorityOf(s3_.endpoint);
    direct_ = options.direct_http && !ProxyConfigured();
  }

  absl::Status Start() {
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return absl::InternalError("curl_multi_init failed");
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                      static_cast<long>(options_.max_connections_per_host));
    absl::StatusOr<std::unique_ptr<CurlEpollDriver>> driver = CurlEpollDriver::Create(multi_);
    if (!driver.ok()) return driver.status();
    driver_ = *std::move(driver);
    http1_ = std::make_unique<Http1Client>(driver_.get(), options_.max_connections_per_host);
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  ~Impl() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (driver_ != nullptr) driver_->Wake();
    if (thread_.joinable()) thread_.join();
    http1_.reset();
    driver_.reset();
    for (CURL* e : idle_easy_) curl_easy_cleanup(e);
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
  }

  absl::StatusOr<RequestPtr> NewRequest(std::string_view object, uint64_t offset, uint64_t length,
                                        uint64_t max_bytes, bool head) const {
    absl::StatusOr<ObjectUrl> url = ParseObjectUrl(object);
    if (!url.ok()) return url.status();
    auto r = std::make_shared<Request>();
    r->key = RequestKey(head, offset, length, object);
    r->name = RedactUrl(object);
    r->head = head;
    r->offset = offset;
    r->length = length;
    r->max_bytes = max_bytes;
    switch (url->scheme) {
      case ObjectUrl::Scheme::kHttp:
      case ObjectUrl::Scheme::kHttps:
        r->full_url = std::string(object);
        r->host = url->authority;
        if (direct_) r->target = DirectTarget(object, *url);
        break;
      case ObjectUrl::Scheme::kS3:
        r->s3 = true;
        if (s3_.path_style) {
          r->full_url = absl::StrCat(s3_.endpoint, "/", url->authority, "/", EncodeKey(url->path));
          r->host = s3_host_;
        } else {
          const size_t sep = s3_.endpoint.find("://") + 3;
          r->full_url = absl::StrCat(s3_.endpoint.substr(0, sep), url->authority, ".",
                                     s3_.endpoint.substr(sep), "/", EncodeKey(url->path));
          r->host = AuthorityOf(r->full_url);
        }
        break;
    }
    return r;
  }

  // Waits for `r` (already submitted or prefetched) and hands over its result.
  absl::Status Await(const RequestPtr& r, std::vector<uint8_t>* out, uint64_t* size) const {
    MutexLock lock(&mu_);
    while (!r->done) cv_.Wait(&mu_);
    if (!r->status.ok()) return r->status;
    if (out != nullptr) {
      out->swap(r->body);
      r->body.clear();
      r->body.shrink_to_fit();
    }
    if (size != nullptr) *size = r->size;
    return absl::OkStatus();
  }

  // Claims a prefetched request for `key`, or submits a new one.
  absl::StatusOr<RequestPtr> Claim(std::string_view object, uint64_t offset, uint64_t length,
                                   uint64_t max_bytes, bool head) const {
    absl::StatusOr<RequestPtr> made = NewRequest(object, offset, length, max_bytes, head);
    if (!made.ok()) return made.status();
    RequestPtr r = *std::move(made);
    bool wake = false;
    {
      MutexLock lock(&mu_);
      if (auto it = pending_.find(r->key); it != pending_.end()) {
        r = std::move(it->second);
        pending_.erase(it);
        prefetch_hits_.fetch_add(1, std::memory_order_relaxed);
        if (r->done) {
          readahead_bytes_ -= r->body.size();
        } else {
          --prefetch_inflight_;
        }
      } else {
        submissions_.push_back(r);
      }
      r->claimed = true;
      if (!r->done) {
        ++claims_waiting_;
        wake = true;  // a read waits: the I/O thread neither sleeps nor pauses on it
      }
    }
    if (wake) driver_->Wake();
    return r;
  }

  bool Prefetch(std::string_view object, uint64_t offset, uint64_t length,
                uint64_t max_bytes) const {
    absl::StatusOr<RequestPtr> r = NewRequest(object, offset, length, max_bytes, false);
    if (!r.ok()) return true;  // the read will report it
    bool wake = false;
    {
      MutexLock lock(&mu_);
      if (pending_.count((*r)->key) != 0) return true;
      const uint64_t estimate = length != kWhole ? length : avg_object_bytes_;
      if (pending_.size() >= kMaxPending ||
          readahead_bytes_ + (prefetch_inflight_ + 1) * estimate > options_.read_ahead_bytes) {
        return false;
      }
      pending_.emplace((*r)->key, *r);
      ++prefetch_inflight_;
      // The I/O thread takes submissions on its next turn; with transfers
      // in flight that comes soon, so only an idle one is woken.
      wake = submissions_.empty() && !io_busy_;
      submissions_.push_back(*r);
    }
    if (wake) driver_->Wake();
    return true;
  }

  // One request for parts [first, last] of `object` (ascending, close
  // together), cut into a prefetch per part when it completes. Parts whose
  // prefetch is under way already are left to it.
  bool PrefetchRun(std::string_view object, std::span<const ByteRangeReader::Range> parts) const {
    const ByteRangeReader::Range& first = parts.front();
    const ByteRangeReader::Range& last = parts.back();
    if (parts.size() == 1) return Prefetch(object, first.offset, first.length, first.length);
    const uint64_t span = last.offset + last.length - first.offset;
    absl::StatusOr<RequestPtr> made = NewRequest(object, first.offset, span, span, false);
    if (!made.ok()) return true;  // the reads will report it
    RequestPtr run = *std::move(made);
    std::vector<RequestPtr> members;
    members.reserve(parts.size());
    for (const ByteRangeReader::Range& p : parts) {
      auto m = std::make_shared<Request>();
      m->key = RequestKey(/*head=*/false, p.offset, p.length, object);
      m->name = run->name;
      m->host = run->host;
      m->offset = p.offset;
      m->length = p.length;
      m->max_bytes = p.length;
      members.push_back(std::move(m));
    }
    bool wake = false;
    {
      MutexLock lock(&mu_);
      uint64_t bytes = 0;
      for (const RequestPtr& m : members) {
        if (pending_.count(m->key) == 0) {
          run->parts.push_back(m);
          bytes += m->length;
        }
      }
      if (run->parts.empty()) return true;
      const uint64_t n = run->parts.size();
      if (pending_.size() + n > kMaxPending ||
          readahead_bytes_ + prefetch_inflight_ * (bytes / n) + bytes > options_.read_ahead_bytes) {
        return false;
      }
      for (const RequestPtr& m : run->parts) pending_.emplace(m->key, m);
      prefetch_inflight_ += n;
      wake = submissions_.empty() && !io_busy_;
      submissions_.push_back(std::move(run));
    }
    if (wake) driver_->Wake();
    return true;
  }

  Counters counters() const {
    Counters c;
    c.requests_started = requests_started_.load(std::memory_order_relaxed);
    c.retries = retries_.load(std::memory_order_relaxed);
    c.prefetch_hits = prefetch_hits_.load(std::memory_order_relaxed);
    c.max_in_flight = max_in_flight_.load(std::memory_order_relaxed);
    c.direct_requests = direct_requests_.load(std::memory_order_relaxed);
    MutexLock lock(&mu_);
    c.readahead_bytes = readahead_bytes_;
    return c;
  }

 private:
  // The I/O thread's state of one host.
  struct Host {
    std::deque<RequestPtr> queue;
    uint32_t active = 0;
    double tokens = 1;
    uint64_t refilled_ns = 0;
  };

  // Where the direct client reaches a host: the address libcurl last
  // reached it at (its name resolution, checked by a whole answer).
  struct DirectHost {
    sockaddr_storage address{};
    socklen_t address_len = 0;
    std::string pool;  // the address as text: the client's pool key
    uint64_t learned_ns = 0;
    bool refused = false;  // it sent an answer the direct client leaves to libcurl
  };

  void Loop() {
    std::mt19937_64 rng(std::random_device{}());
    uint64_t last_sweep_ns = MonotonicNanos();
    uint64_t last_wake_ns = 0;
    std::vector<Http1Get*> direct_done;
    while (true) {
      std::vector<RequestPtr> fresh;
      bool pause = false;
      bool busy = false;
      {
        MutexLock lock(&mu_);
        if (stopping_) break;
        fresh.swap(submissions_);
        io_busy_ = busy = !active_.empty() || !direct_active_.empty();
        pause = busy && claims_waiting_ == 0;
      }
      const uint64_t now = MonotonicNanos();
      for (RequestPtr& r : fresh) hosts_[r->host].queue.push_back(std::move(r));
      // Retries whose wait is over go back to their host's queue.
      for (size_t i = 0; i < delayed_.size();) {
        if (delayed_[i]->not_before_ns <= now) {
          hosts_[delayed_[i]->host].queue.push_front(delayed_[i]);
          delayed_[i] = delayed_.back();
          delayed_.pop_back();
        } else {
          ++i;
        }
      }
      uint64_t wake_ns = now + kMaxWaitNs;
      for (auto& [name, h] : hosts_) StartQueued(&h, now, &wake_ns);
      for (const RequestPtr& r : delayed_) wake_ns = std::min(wake_ns, r->not_before_ns);
      wake_ns = std::min(wake_ns, http1_->NextDeadline());
      if (!busy && (!active_.empty() || !direct_active_.empty())) {
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
      while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Finished(msg->easy_handle, msg->data.result, &rng);
      }
      http1_->ExpireDeadlines(MonotonicNanos());
      direct_done.clear();
      http1_->TakeFinished(&direct_done);
      for (Http1Get* g : direct_done) FinishedDirect(g, &rng);
      if (const uint64_t t = MonotonicNanos(); t - last_sweep_ns > 1'000'000'000ull) {
        DropUnclaimed(t);
        last_sweep_ns = t;
      }
    }
    // Stopping: fail whatever is left so no reader waits forever.
    std::vector<RequestPtr> left_over;
    for (auto& [easy, r] : active_) {
      curl_multi_remove_handle(multi_, easy);
      left_over.push_back(r);
    }
    active_.clear();
    for (auto& [get, r] : direct_active_) left_over.push_back(r);
    direct_active_.clear();  // (their sockets close with the client)
    for (auto& [name, h] : hosts_)
      left_over.insert(left_over.end(), h.queue.begin(), h.queue.end());
    left_over.insert(left_over.end(), delayed_.begin(), delayed_.end());
    MutexLock lock(&mu_);
    left_over.insert(left_over.end(), submissions_.begin(), submissions_.end());
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

  void StartQueued(Host* h, uint64_t now, uint64_t* wake_ns) {
    const double rate = options_.requests_per_second_per_host;
    if (rate > 0) {
      const double burst = std::max(1.0, rate / 10);
      if (h->refilled_ns == 0) h->refilled_ns = now;
      h->tokens = std::min(burst, h->tokens + (now - h->refilled_ns) * 1e-9 * rate);
      h->refilled_ns = now;
    }
    while (!h->queue.empty() && h->active < options_.max_connections_per_host) {
      if (rate > 0 && h->tokens < 1) {
        *wake_ns =
            std::min(*wake_ns, now + static_cast<uint64_t>((1 - h->tokens) / rate * 1e9) + 1);
        return;
      }
      if (rate > 0) h->tokens -= 1;
      RequestPtr r = std::move(h->queue.front());
      h->queue.pop_front();
      StartTransfer(r);
      ++h->active;
    }
  }

  void StartTransfer(const RequestPtr& r) {
    ReleaseEasy(r.get());
    r->body.clear();
    r->received = 0;
    r->cursor = 0;
    for (const RequestPtr& part : r->parts) part->body.clear();  // (a retry)
    r->status_seen = false;
    r->range_ignored = false;
    r->enough = false;
    r->too_large = false;
    r->http_status = 0;
    ++r->attempt;
    if (!r->target.empty() && !r->head) {
      if (const DirectHost* d = DirectHostOf(r->host); d != nullptr) return StartDirect(r, *d);
    }
    CURL* e = AcquireEasy();
    r->easy = e;
    curl_easy_setopt(e, CURLOPT_URL, r->full_url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, r.get());
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r.get());
    if (r->head) {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);  // (undoes a NOBODY of the handle's last use)
    }
    std::string range;
    if (!r->head && r->length != kWhole) {
      range = absl::StrCat(r->offset, "-", r->offset + r->length - 1);
    }
    curl_easy_setopt(e, CURLOPT_RANGE, range.empty() ? nullptr : range.c_str());  // copied
    if (r->s3 && !s3_.access_key_id.empty()) {
      const std::string sigv4 = absl::StrCat("aws:amz:", s3_.region, ":s3");
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(e, CURLOPT_USERNAME, s3_.access_key_id.c_str());
      curl_easy_setopt(e, CURLOPT_PASSWORD, s3_.secret_access_key.c_str());
      r->headers = curl_slist_append(r->headers, kEmptySha256);
      if (!s3_.session_token.empty()) {
        const std::string token = absl::StrCat("x-amz-security-token: ", s3_.session_token);
        r->headers = curl_slist_append(r->headers, token.c_str());
      }
    } else {
      curl_easy_setopt(e, CURLOPT_AWS_SIGV4, nullptr);
      curl_easy_setopt(e, CURLOPT_USERNAME, nullptr);
      curl_easy_setopt(e, CURLOPT_PASSWORD, nullptr);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);  // null: none
    active_.emplace(e, r);
    curl_multi_add_handle(multi_, e);
    CountStart();
  }

  void CountStart() {
    requests_started_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t n = active_.size() + direct_active_.size();
    if (n > max_in_flight_.load(std::memory_order_relaxed)) {
      max_in_flight_.store(n, std::memory_order_relaxed);
    }
  }

  // The direct client's way to `host`, when libcurl has reached it lately
  // and it has sent nothing the client leaves to libcurl; else null.
  const DirectHost* DirectHostOf(const std::string& host) const {
    auto it = direct_hosts_.find(host);
    if (it == direct_hosts_.end() || it->second.refused || it->second.address_len == 0) {
      return nullptr;  // (an entry made by a refusal, or by an answer with no usable address)
    }
    if (MonotonicNanos() - it->second.learned_ns > kDirectAddressTtlNs) return nullptr;
    return &it->second;
  }

  // A plain GET through the direct client, its body received into r->body.
  void StartDirect(const RequestPtr& r, const DirectHost& d) {
    if (r->direct == nullptr) r->direct = std::make_unique<Http1Get>();
    Http1Get* g = r->direct.get();
    g->address = d.address;
    g->address_len = d.address_len;
    g->pool = d.pool;
    g->head = absl::StrCat("GET ", r->target, " HTTP/1.1\r\nHost: ", r->host,
                           "\r\nUser-Agent: conveyord\r\nAccept: */*\r\n");
    g->range_asked = r->length != kWhole;
    if (g->range_asked) {
      absl::StrAppend(&g->head, "Range: bytes=", r->offset, "-", r->offset + r->length - 1, "\r\n");
    }
    g->head.append("\r\n");
    g->max_body = g->range_asked ? r->length : r->max_bytes;
    g->body = &r->body;
    // A run: each part's bytes straight into the part, the gaps dropped.
    g->pieces.clear();
    uint64_t at = r->offset;
    for (const RequestPtr& part : r->parts) {
      if (part->offset > at) g->pieces.push_back({nullptr, part->offset - at});
      g->pieces.push_back({&part->body, part->length});
      at = part->offset + part->length;
    }
    const uint64_t now = MonotonicNanos();
    g->connect_deadline_ns = now + uint64_t{options_.connect_timeout_ms} * 1'000'000;
    g->deadline_ns = now + uint64_t{options_.request_timeout_ms} * 1'000'000;
    direct_active_.emplace(g, r);
    direct_requests_.fetch_add(1, std::memory_order_relaxed);
    CountStart();
    http1_->Start(g);
  }

  // After a whole answer from libcurl over plain HTTP/1.x: where it reached
  // the host, for the direct client's requests to come.
  void LearnAddress(const Request& r, CURL* easy) {
    DirectHost& d = direct_hosts_[r.host];
    if (d.refused) return;
    long version = 0;
    char* ip = nullptr;
    long port = 0;
    if (curl_easy_getinfo(easy, CURLINFO_HTTP_VERSION, &version) != CURLE_OK ||
        (version != CURL_HTTP_VERSION_1_1 && version != CURL_HTTP_VERSION_1_0) ||
        curl_easy_getinfo(easy, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK || ip == nullptr ||
        curl_easy_getinfo(easy, CURLINFO_PRIMARY_PORT, &port) != CURLE_OK || port <= 0 ||
        port > 65535) {
      return;
    }
    sockaddr_storage address{};
    socklen_t len = 0;
    if (auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
        inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in);
    } else if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
               inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof(sockaddr_in6);
    } else {
      return;
    }
    d.address = address;
    d.address_len = len;
    d.pool = absl::StrCat(ip, " ", port);
    d.learned_ns = MonotonicNanos();
  }

  // An easy handle with the settings every transfer shares: one kept from
  // an earlier transfer (its receive buffer already allocated), else a new one.
  CURL* AcquireEasy() {
    if (!idle_easy_.empty()) {
      CURL* e = idle_easy_.back();
      idle_easy_.pop_back();
      return e;
    }
    CURL* e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_ms));
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &WriteBody);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, kReceiveBufferBytes);
    return e;
  }

  // Gives r's easy handle (out of the multi handle already) back to the pool.
  void ReleaseEasy(Request* r) {
    if (r->easy != nullptr) {
      if (idle_easy_.size() < kMaxIdleEasy) {
        idle_easy_.push_back(r->easy);
      } else {
        curl_easy_cleanup(r->easy);
      }
    }
    r->easy = nullptr;
    if (r->headers != nullptr) curl_slist_free_all(r->headers);
    r->headers = nullptr;
  }

  void Finished(CURL* easy, CURLcode code, std::mt19937_64* rng) {
    auto it = active_.find(easy);
    if (it == active_.end()) return;
    RequestPtr r = std::move(it->second);
    active_.erase(it);
    curl_multi_remove_handle(multi_, easy);
    --hosts_[r->host].active;
    if (r->http_status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (r->head && code == CURLE_OK) {
      curl_off_t len = -1;
      curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      r->size = len < 0 ? 0 : static_cast<uint64_t>(len);
      if (len < 0 && r->http_status < 300) {
        return Complete(r, absl::FailedPreconditionError(absl::StrCat(
                               "HEAD ", r->name, ": the answer has no Content-Length")));
      }
    }
    if (code == CURLE_OK && !r->target.empty() && r->http_status >= 200 && r->http_status < 300) {
      LearnAddress(*r, easy);
    }
    const std::string error = code == CURLE_OK ? "" : curl_easy_strerror(code);
    Conclude(r, error, code != CURLE_OK && IsRetryableCurlCode(code), rng);
  }

  // A direct client's transfer ended.
  void FinishedDirect(Http1Get* g, std::mt19937_64* rng) {
    auto it = direct_active_.find(g);
    if (it == direct_active_.end()) return;
    RequestPtr r = std::move(it->second);
    direct_active_.erase(it);
    --hosts_[r->host].active;
    switch (g->result) {
      case Http1Get::Result::kUnsupported: {
        // libcurl's from now on; this request again, through it, as the
        // same attempt.
        DirectHost& d = direct_hosts_[r->host];
        if (!d.refused) {
          spdlog::info(
              "remote: {}: the direct HTTP client leaves its answers to libcurl from "
              "now on: {}",
              EscapeText(r->host), g->error);
        }
        d.refused = true;
        --r->attempt;
        hosts_[r->host].queue.push_front(std::move(r));
        return;
      }
      case Http1Get::Result::kFailed:
      case Http1Get::Result::kTimedOut: return Conclude(r, g->error, /*retryable=*/true, rng);
      case Http1Get::Result::kTooLarge:
        r->http_status = g->status;
        r->too_large = true;
        return Conclude(r, "", false, rng);
      case Http1Get::Result::kOk:
        r->http_status = g->status;
        if (g->status >= 300) {
          r->body = std::move(g->error_body);
        } else {
          r->received = r->parts.empty() ? r->body.size() : g->content_length;
        }
        return Conclude(r, "", false, rng);
    }
  }

  // Judges a transfer's end: `transport_error` says why no answer came ("" =
  // one did: r->http_status and the body), `retryable` whether that is worth
  // another attempt. Retries it, or settles it (Complete).
  void Conclude(RequestPtr& r, const std::string& transport_error, bool retryable,
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
    if (retry_transport || retry_http) {
      r->last_error = retry_transport ? transport_error : absl::StrCat("HTTP ", r->http_status);
      if (r->attempt < policy_.max_attempts) {
        retries_.fetch_add(1, std::memory_order_relaxed);
        r->not_before_ns = MonotonicNanos() + policy_.DelayNs(r->attempt, (*rng)());
        ReleaseEasy(r.get());
        delayed_.push_back(std::move(r));
        return;
      }
      return Complete(r, MarkSystemError(absl::UnavailableError(absl::StrCat(
                             verb, r->name, ": host ", EscapeText(r->host), " failed ", r->attempt,
                             " attempts, the last with: ", r->last_error))));
    }
    if (failed) {
      return Complete(r,
                      MarkSystemError(absl::UnavailableError(absl::StrCat(
                          verb, r->name, ": host ", EscapeText(r->host), ": ", transport_error))));
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

  // Settles `r` (a run: its parts) with `status` and lets go of the I/O
  // thread's reference to it (r is null after). The reference is dropped
  // under the lock, before any reader is woken, so the last one always
  // belongs to the reader that claims the request (or the read-ahead map):
  // a status a reader copied is then freed on the reader's thread, never
  // under it on this one (absl::Status shares its message between copies).
  void Complete(RequestPtr& r, absl::Status status) {
    ReleaseEasy(r.get());
    const uint64_t now = MonotonicNanos();
    MutexLock lock(&mu_);
    bool waited_for = false;
    if (r->parts.empty()) {
      waited_for = Settle(r, std::move(status), now);
    } else {
      // Each part holds its bytes already (Store). An answer that ended
      // early (the object is shorter than the run) fails the parts it cut.
      for (const RequestPtr& part : r->parts) {
        absl::Status part_status = Unshared(status);
        if (status.ok() && part->body.size() != part->length) {
          part_status = absl::OutOfRangeError(absl::StrCat(
              "GET ", r->name, ": bytes [", part->offset, ", ", part->offset + part->length,
              ") asked, the object ends at byte ", r->offset + r->received));
        }
        waited_for |= Settle(part, std::move(part_status), now);
      }
      r->done = true;
      r->parts.clear();
    }
    r.reset();
    if (waited_for) cv_.SignalAll();  // only a claimed request has anyone waiting for it
  }

  // Marks `r` (a request or a run's part) done with `status` and settles the
  // read-ahead accounting: an unclaimed one's bytes are kept for its read. True
  // when it was claimed (a reader waits for it).
  bool Settle(const RequestPtr& r, absl::Status status, uint64_t now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!status.ok()) r->body.clear();
    r->status = std::move(status);
    r->done = true;
    r->done_ns = now;
    if (r->status.ok() && r->length == kWhole) {
      avg_object_bytes_ = (avg_object_bytes_ * 7 + std::max<uint64_t>(r->body.size(), 1)) / 8;
    }
    if (!r->claimed) {
      --prefetch_inflight_;
      readahead_bytes_ += r->body.size();
      return false;
    }
    --claims_waiting_;
    return true;
  }

  void DropUnclaimed(uint64_t now) {
    MutexLock lock(&mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      const Request& r = *it->second;
      if (r.done && now - r.done_ns > kUnclaimedTtlNs) {
        readahead_bytes_ -= r.body.size();
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const RemoteOptions options_;
  const S3Config s3_;
  std::string s3_host_;
  BackoffPolicy policy_;
  CURLM* multi_ = nullptr;
  std::unique_ptr<CurlEpollDriver> driver_;
  std::thread thread_;

  // The I/O thread's own.
  std::map<std::string, Host> hosts_;
  std::unordered_map<CURL*, RequestPtr> active_;
  std::vector<RequestPtr> delayed_;     // retries waiting for their time
  std::vector<CURL*> idle_easy_;        // easy handles kept for reuse (AcquireEasy)
  std::unique_ptr<Http1Client> http1_;  // the direct client (plain http:// GETs)
  bool direct_ = true;  // it is used (options, no proxy); set before the thread starts
  std::unordered_map<Http1Get*, RequestPtr> direct_active_;
  std::unordered_map<std::string, DirectHost> direct_hosts_;

  mutable std::atomic<uint64_t> requests_started_{0};
  mutable std::atomic<uint64_t> retries_{0};
  mutable std::atomic<uint64_t> prefetch_hits_{0};
  mutable std::atomic<uint64_t> max_in_flight_{0};
  mutable std::atomic<uint64_t> direct_requests_{0};

  mutable Mutex mu_;
  mutable CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  mutable std::vector<RequestPtr> submissions_ ABSL_GUARDED_BY(mu_);
  // Prefetched requests not claimed yet, by key.
  mutable std::unordered_map<std::string, RequestPtr> pending_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t readahead_bytes_ ABSL_GUARDED_BY(mu_) = 0;    // done, unclaimed
  mutable uint64_t prefetch_inflight_ ABSL_GUARDED_BY(mu_) = 0;  // started, not done, unclaimed
  mutable uint64_t avg_object_bytes_ ABSL_GUARDED_BY(mu_) = 128 << 10;
  // Claimed requests not done yet: a reader waits (or is about to) for each.
  mutable uint64_t claims_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  // The I/O thread has transfers in flight, so it will look at submissions
  // again soon without being woken (set by the I/O thread).
  bool io_busy_ ABSL_GUARDED_BY(mu_) = false;
};

RemoteReader::RemoteReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RemoteReader::~RemoteReader() = default;

absl::StatusOr<std::shared_ptr<RemoteReader>> RemoteReader::Create(const RemoteOptions& options,
                                                                   const S3Config& s3) {
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(global)));
  }
  auto impl = std::make_unique<Impl>(options, s3);
  if (absl::Status st = impl->Start(); !st.ok()) return st;
  return std::shared_ptr<RemoteReader>(new RemoteReader(std::move(impl)));
}

absl::StatusOr<uint64_t> RemoteReader::Size(std::string_view object) const {
  absl::StatusOr<RequestPtr> r = impl_->Claim(object, 0, kWhole, kWhole, /*head=*/true);
  if (!r.ok()) return r.status();
  uint64_t size = 0;
  if (absl::Status st = impl_->Await(*r, nullptr, &size); !st.ok()) return st;
  return size;
}

absl::Status RemoteReader::ReadRange(std::string_view object, uint64_t offset, uint64_t length,
                                     std::vector<uint8_t>* out) const {
  if (length == 0) {
    out->clear();
    return absl::OkStatus();
  }
  if (length == kWhole || offset > kWhole - length) {
    return absl::OutOfRangeError(absl::StrCat(RedactUrl(object), ": bad range"));
  }
  absl::StatusOr<RequestPtr> r = impl_->Claim(object, offset, length, length, false);
  if (!r.ok()) return r.status();
  return impl_->Await(*r, out, nullptr);
}

bool RemoteReader::Prefetch(std::string_view object, uint64_t offset, uint64_t length) const {
  if (length == 0 || length == kWhole || offset > kWhole - length) return true;  // ReadRange says
  return impl_->Prefetch(object, offset, length, length);
}

absl::Status RemoteReader::ReadWhole(std::string_view object, uint64_t max_bytes,
                                     std::vector<uint8_t>* out) const {
  absl::StatusOr<RequestPtr> r = impl_->Claim(object, 0, kWhole, max_bytes, false);
  if (!r.ok()) return r.status();
  return impl_->Await(*r, out, nullptr);
}

bool RemoteReader::PrefetchWhole(std::string_view object, uint64_t max_bytes) const {
  return impl_->Prefetch(object, 0, kWhole, max_bytes);
}

bool RemoteReader::PrefetchRun(std::string_view object, std::span<const Range> parts) const {
  // Split where parts are far apart (or out of order), or the run grows too
  // long: the bytes between parts are fetched and dropped.
  size_t begin = 0;
  while (begin < parts.size()) {
    const Range& head = parts[begin];
    if (head.length == 0 || head.length == kWhole || head.offset > kWhole - head.length) {
      ++begin;  // the read reports it
      continue;
    }
    size_t end = begin + 1;
    for (; end < parts.size(); ++end) {
      const Range& prev = parts[end - 1];
      const Range& next = parts[end];
      const uint64_t prev_end = prev.offset + prev.length;
      if (next.length == 0 || next.offset < prev_end || next.offset - prev_end > kMaxRunGapBytes ||
          next.length > kMaxRunBytes || next.offset + next.length - head.offset > kMaxRunBytes) {
        break;
      }
    }
    if (!impl_->PrefetchRun(object, parts.subspan(begin, end - begin))) return false;
    begin = end;
  }
  return true;
}

RemoteReader::Counters RemoteReader::counters() const { return impl_->counters(); }

absl::StatusOr<std::shared_ptr<RemoteReader>> MakeRemoteRangeReader(const RemoteOptions& options) {
  absl::StatusOr<S3Config> s3 =
      ResolveS3Config(options, [](const char* n) { return std::getenv(n); });
  if (!s3.ok()) return s3.status();
  return RemoteReader::Create(options, *s3);
}

}  // namespace conveyor::remote
