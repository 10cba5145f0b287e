// RemoteReader's public methods and a read's Request (what URL is fetched,
// through which client); the work is split over the files listed in
// remote/remote_reader_impl.h.
#include "remote/remote_reader.h"

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "absl/strings/str_cat.h"
#include "core/engine/stats.h"
#include "remote/http_freshness.h"
#include "remote/remote_reader_impl.h"
#include "remote/s3_url.h"

namespace conveyor::remote {

namespace {

// PrefetchRun: parts further apart than this, or a run longer than
// kMaxRunBytes, start a new request (the bytes between parts are read and
// dropped, so a wide gap is cheaper as two requests).
constexpr uint64_t kMaxRunGapBytes = 64 << 10;
constexpr uint64_t kMaxRunBytes = 16 << 20;
// A prefetched HEAD answer older than this when its StatAsync claims it is
// not used (sent again): revalidation happens at most this long before a read.
constexpr uint64_t kMaxStatAgeNs = 1'000'000'000;
// remote.io_threads at most.
constexpr uint32_t kMaxIoThreads = 64;

}  // namespace

absl::StatusOr<RequestPtr> RemoteReader::Impl::NewRequest(std::string_view object, uint64_t offset,
                                                          uint64_t length, uint64_t max_bytes,
                                                          bool head) const {
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
      if (direct_enabled_) r->target = DirectTarget(object, *url);
      break;
    case ObjectUrl::Scheme::kS3: {
      r->s3 = true;
      S3Address where = S3ObjectAddress(s3_, url->authority, url->path);
      r->full_url = std::move(where.url);
      r->host = std::move(where.host);
      break;
    }
  }
  return r;
}

RemoteReader::RemoteReader(std::vector<std::unique_ptr<Impl>> impls) : impls_(std::move(impls)) {}
RemoteReader::~RemoteReader() = default;

const RemoteReader::Impl& RemoteReader::ImplFor(std::string_view object) const {
  if (impls_.size() == 1) return *impls_.front();
  return *impls_[std::hash<std::string_view>{}(object) % impls_.size()];
}

absl::StatusOr<std::shared_ptr<RemoteReader>> RemoteReader::Create(const RemoteOptions& options,
                                                                   const S3Config& s3) {
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK) {
    return absl::InternalError(absl::StrCat("curl_global_init: ", curl_easy_strerror(global)));
  }
  // Each I/O thread gets its share of the per-host limits and the budget
  // (at least one connection each), so the reader as a whole keeps to them.
  const uint32_t n = std::clamp<uint32_t>(options.io_threads, 1, kMaxIoThreads);
  std::vector<std::unique_ptr<Impl>> impls;
  for (uint32_t i = 0; i < n; ++i) {
    RemoteOptions share = options;
    const uint32_t limit = options.max_connections_per_host;
    share.max_connections_per_host = std::max<uint32_t>(1, limit / n + (i < limit % n ? 1 : 0));
    share.requests_per_second_per_host = options.requests_per_second_per_host / n;
    share.read_ahead_bytes = options.read_ahead_bytes / n;
    impls.push_back(std::make_unique<Impl>(share, s3));
    if (absl::Status st = impls.back()->Start(); !st.ok()) return st;
  }
  return std::shared_ptr<RemoteReader>(new RemoteReader(std::move(impls)));
}

absl::StatusOr<uint64_t> RemoteReader::Size(std::string_view object) const {
  absl::StatusOr<RequestPtr> r = ImplFor(object).Claim(object, 0, kWhole, kWhole, /*head=*/true);
  if (!r.ok()) return r.status();
  uint64_t size = 0;
  if (absl::Status st = ImplFor(object).Await(*r, nullptr, &size); !st.ok()) return st;
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
  absl::StatusOr<RequestPtr> r = ImplFor(object).Claim(object, offset, length, length, false);
  if (!r.ok()) return r.status();
  return ImplFor(object).Await(*r, out, nullptr);
}

std::shared_ptr<PendingRead> RemoteReader::ReadRangeAsync(std::string_view object, uint64_t offset,
                                                          uint64_t length,
                                                          std::vector<uint8_t>* out,
                                                          ReadDone done) const {
  if (length == 0) {
    out->clear();
    done(absl::OkStatus());
    return nullptr;
  }
  if (length == kWhole || offset > kWhole - length) {
    done(absl::OutOfRangeError(absl::StrCat(RedactUrl(object), ": bad range")));
    return nullptr;
  }
  absl::StatusOr<RequestPtr> r = ImplFor(object).Claim(object, offset, length, length, false);
  if (!r.ok()) {
    done(r.status());
    return nullptr;
  }
  return ImplFor(object).AwaitAsync(*r, out, std::move(done));
}

bool RemoteReader::Prefetch(std::string_view object, uint64_t offset, uint64_t length) const {
  if (length == 0 || length == kWhole || offset > kWhole - length) return true;  // ReadRange says
  return ImplFor(object).Prefetch(object, offset, length, length);
}

absl::Status RemoteReader::ReadWhole(std::string_view object, uint64_t max_bytes,
                                     std::vector<uint8_t>* out) const {
  absl::StatusOr<RequestPtr> r = ImplFor(object).Claim(object, 0, kWhole, max_bytes, false);
  if (!r.ok()) return r.status();
  return ImplFor(object).Await(*r, out, nullptr);
}

std::shared_ptr<PendingRead> RemoteReader::ReadWholeAsync(std::string_view object,
                                                          uint64_t max_bytes,
                                                          std::vector<uint8_t>* out,
                                                          ReadDone done) const {
  absl::StatusOr<RequestPtr> r = ImplFor(object).Claim(object, 0, kWhole, max_bytes, false);
  if (!r.ok()) {
    done(r.status());
    return nullptr;
  }
  return ImplFor(object).AwaitAsync(*r, out, std::move(done));
}

std::shared_ptr<PendingRead> RemoteReader::StatAsync(std::string_view object, ObjectValidators* out,
                                                     ReadDone done) const {
  const Impl& impl = ImplFor(object);
  absl::StatusOr<RequestPtr> r = impl.Claim(object, 0, kWhole, kWhole, /*head=*/true);
  if (!r.ok()) {
    done(r.status());
    return nullptr;
  }
  // A HEAD has no body; the request's fields are read once it is settled
  // (the I/O thread wrote them before, under the reader's mutex). A HEAD
  // sent ahead (PrefetchStat) whose answer is older than kMaxStatAgeNs
  // when claimed (a stream that went away left it) is sent again.
  auto no_body = std::make_shared<std::vector<uint8_t>>();
  RequestPtr req = *r;
  const std::string name(object);
  return impl.AwaitAsync(
      req, no_body.get(),
      [this, name, req, no_body, out, done = std::move(done)](absl::Status st) mutable {
        if (st.ok() && MonotonicNanos() - req->done_ns > kMaxStatAgeNs) {
          // (The new HEAD's handle is not kept: a cancelled read's `done`
          // must then ignore its result, as CachedObjectReader's does.)
          StatAsync(name, out, std::move(done));
          return;
        }
        if (st.ok()) {
          out->size = req->size;
          out->etag = req->etag;
          out->last_modified = req->last_modified;
          out->fresh_seconds = FreshSeconds(req->cache_control, req->age);
        }
        done(std::move(st));
      });
}

bool RemoteReader::PrefetchWhole(std::string_view object, uint64_t max_bytes) const {
  return ImplFor(object).Prefetch(object, 0, kWhole, max_bytes);
}

bool RemoteReader::PrefetchStat(std::string_view object) const {
  return ImplFor(object).Prefetch(object, 0, kWhole, kWhole, /*head=*/true);
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
    if (!ImplFor(object).PrefetchRun(object, parts.subspan(begin, end - begin))) return false;
    begin = end;
  }
  return true;
}

RemoteReader::Counters RemoteReader::counters() const {
  Counters sum;
  for (const std::unique_ptr<Impl>& impl : impls_) {
    const Counters c = impl->counters();
    sum.requests_started += c.requests_started;
    sum.retries += c.retries;
    sum.prefetch_hits += c.prefetch_hits;
    sum.readahead_bytes += c.readahead_bytes;
    sum.max_in_flight += c.max_in_flight;  // (each thread's own peak, summed)
    sum.direct_requests += c.direct_requests;
  }
  return sum;
}

std::vector<HostStats> RemoteReader::host_stats() const {
  std::vector<std::vector<HostStats>> parts;
  parts.reserve(impls_.size());
  for (const std::unique_ptr<Impl>& impl : impls_) parts.push_back(impl->host_stats());
  return MergeHostStats(parts);
}

absl::StatusOr<std::shared_ptr<RemoteReader>> MakeRemoteRangeReader(const RemoteOptions& options) {
  absl::StatusOr<S3Config> s3 =
      ResolveS3Config(options, [](const char* n) { return std::getenv(n); });
  if (!s3.ok()) return s3.status();
  return RemoteReader::Create(options, *s3);
}

}  // namespace conveyor::remote
