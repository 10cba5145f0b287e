// Transfers through libcurl (RemoteReader::Impl, remote/remote_reader_impl.h):
// the pool of easy handles, a transfer's options (URL, range, S3 signing),
// the header callback that checks a 206's Content-Range against the range
// asked, the write callback that takes the body straight into the request's
// buffer (a range cut out of a 200 answer, a run's bytes into each part) and
// the end of a transfer. All on the I/O thread.
#include <algorithm>
#include <optional>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/engine/stats.h"
#include "remote/backoff.h"
#include "remote/curl_handles.h"
#include "remote/http_response_head.h"
#include "remote/remote_reader_impl.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

// libcurl's receive buffer per transfer (its default is 16 KiB): an image of
// ~100 KiB that is all there arrives in one recv and one write callback, not
// seven of each.
constexpr long kReceiveBufferBytes = 128 << 10;
// Easy handles kept for reuse (each holds its receive buffer and settings).
constexpr size_t kMaxIdleEasy = 512;
// Bytes of an error answer kept for the message (S3's <Code>).
constexpr size_t kMaxErrorBody = 4096;
// SHA-256 of an empty payload: S3 wants the payload hash in a header.
constexpr char kEmptySha256[] =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// Object sizes remembered per I/O thread at most (HEADs of tar shards).
constexpr size_t kMaxKnownSizes = 1 << 16;

// Each line of an answer's head (the status line, each field, the blank line
// at its end). For a range asked, a 206 must name that range in its
// Content-Range: checked when the field comes (or at the end of the head
// when none came), before any body byte is taken; a mismatch stops the
// transfer (returning 0) with r->answer_error set.
// A HEAD answer's ETag, Last-Modified, Cache-Control or Age line into r (a
// new answer, after a redirect or a 1xx, starts with its status line: the
// fields are cleared). Cache-Control fields are joined with ", ".
void TakeValidator(std::string_view line, Request* r) {
  if (line.substr(0, 5) == "HTTP/") {
    r->etag.clear();
    r->last_modified.clear();
    r->cache_control.clear();
    r->age.clear();
    return;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return;
  const absl::string_view name(line.data(), colon);
  const bool cache_control = absl::EqualsIgnoreCase(name, "cache-control");
  std::string* field = absl::EqualsIgnoreCase(name, "etag")            ? &r->etag
                       : absl::EqualsIgnoreCase(name, "last-modified") ? &r->last_modified
                       : cache_control                                 ? &r->cache_control
                       : absl::EqualsIgnoreCase(name, "age")           ? &r->age
                                                                       : nullptr;
  if (field == nullptr) return;
  std::string_view v = line.substr(colon + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() &&
         (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t')) {
    v.remove_suffix(1);
  }
  v = v.substr(0, 1024);
  if (cache_control && !field->empty()) {
    if (field->size() < 4096) absl::StrAppend(field, ", ", absl::string_view(v.data(), v.size()));
    return;
  }
  *field = std::string(v);
}

size_t TakeHeaderLine(char* data, size_t size, size_t n, void* user) {
  Request* r = static_cast<Request*>(user);
  const size_t len = size * n;
  const std::string_view line(data, len);
  if (r->head) {
    TakeValidator(line, r);
    return len;
  }
  if (r->length == kWhole || r->range_checked) return len;
  long status = 0;
  curl_easy_getinfo(r->easy.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status != 206) return len;
  constexpr std::string_view kField = "content-range:";
  std::optional<std::string_view> value;
  if (line.size() >= kField.size() &&
      absl::EqualsIgnoreCase(absl::string_view(line.data(), kField.size()),
                             absl::string_view(kField.data(), kField.size()))) {
    std::string_view v = line.substr(kField.size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() &&
           (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t')) {
      v.remove_suffix(1);
    }
    value = v;
  } else if (line != "\r\n" && line != "\n") {
    return len;  // another field
  }
  // (At the end of the head, value is absent: a 206 without Content-Range.)
  r->range_checked = true;
  r->answer_error = ContentRangeMismatch(value, r->offset, r->length, r->known_size);
  return r->answer_error.empty() ? len : 0;
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  Request* r = static_cast<Request*>(user);
  const size_t len = size * n;
  if (!r->status_seen) {
    r->status_seen = true;
    curl_easy_getinfo(r->easy.get(), CURLINFO_RESPONSE_CODE, &r->http_status);
    if (r->http_status == 200 && r->length != kWhole) {
      r->range_ignored = true;
      r->skip = r->offset;
    }
    // One allocation for the body, not a doubling series of copies: the
    // range asked, else the announced length (at most the object limit).
    if (r->http_status < 300 && r->parts.empty()) {
      curl_off_t announced = -1;
      curl_easy_getinfo(r->easy.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &announced);
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

void RemoveFromMulti(CURLM* multi, CURL* easy) {
  // Fails only for a handle not in `multi` (a bug): said, then carried on.
  if (absl::Status st =
          CurlMultiError("curl_multi_remove_handle", curl_multi_remove_handle(multi, easy));
      !st.ok()) {
    spdlog::error("remote: {}", std::string(st.message()));
  }
}

// A transfer of `r` through libcurl: an easy handle with its URL, range and
// (S3) signing, added to the multi handle. Nothing started on an error.
absl::Status RemoteReader::Impl::StartCurl(const RequestPtr& r) {
  absl::StatusOr<UniqueCurlEasy> easy = AcquireEasy();
  if (!easy.ok()) return easy.status();
  r->easy = *std::move(easy);
  CURL* const e = r->easy.get();
  std::string range;
  if (!r->head && r->length != kWhole) {
    range = absl::StrCat(r->offset, "-", r->offset + r->length - 1);
  }
  const bool sign = r->s3 && !s3_.access_key_id.empty();
  std::string sigv4;
  if (sign) {
    sigv4 = absl::StrCat("aws:amz:", s3_.region, ":s3");
    bool appended = AppendCurlSlist(&r->headers, kEmptySha256);
    if (appended && !s3_.session_token.empty()) {
      const std::string token = absl::StrCat("x-amz-security-token: ", s3_.session_token);
      appended = AppendCurlSlist(&r->headers, token.c_str());
    }
    if (!appended) {
      r->easy.reset();
      r->headers.reset();
      return absl::ResourceExhaustedError("curl_slist_append: out of memory");
    }
  }
  CurlOptions o(e);
  o.Set(CURLOPT_URL, r->full_url.c_str(), "CURLOPT_URL");
  o.Set(CURLOPT_PRIVATE, static_cast<void*>(r.get()), "CURLOPT_PRIVATE");
  o.Set(CURLOPT_WRITEDATA, static_cast<void*>(r.get()), "CURLOPT_WRITEDATA");
  o.Set(CURLOPT_HEADERDATA, static_cast<void*>(r.get()), "CURLOPT_HEADERDATA");
  if (r->head) {
    o.Set(CURLOPT_NOBODY, 1L, "CURLOPT_NOBODY");
  } else {
    o.Set(CURLOPT_HTTPGET, 1L, "CURLOPT_HTTPGET");  // (undoes a NOBODY of the handle's last use)
  }
  const char* none = nullptr;
  o.Set(CURLOPT_RANGE, range.empty() ? none : range.c_str(), "CURLOPT_RANGE");  // copied
  // (Strings are copied by libcurl; null clears what the handle's last use set.)
  o.Set(CURLOPT_AWS_SIGV4, sign ? sigv4.c_str() : none, "CURLOPT_AWS_SIGV4");
  o.Set(CURLOPT_USERNAME, sign ? s3_.access_key_id.c_str() : none, "CURLOPT_USERNAME");
  o.Set(CURLOPT_PASSWORD, sign ? s3_.secret_access_key.c_str() : none, "CURLOPT_PASSWORD");
  o.Set(CURLOPT_HTTPHEADER, r->headers.get(), "CURLOPT_HTTPHEADER");  // null: none
  absl::Status st = o.status();
  if (st.ok()) {
    st = CurlMultiError("curl_multi_add_handle", curl_multi_add_handle(multi_.get(), e));
  }
  if (!st.ok()) {
    r->easy.reset();  // (not back to the pool: its options are half set)
    r->headers.reset();
    return st;
  }
  active_.emplace(e, r);
  CountStart();
  return absl::OkStatus();
}

// An easy handle with the settings every transfer shares: one kept from
// an earlier transfer (its receive buffer already allocated), else a new one.
absl::StatusOr<UniqueCurlEasy> RemoteReader::Impl::AcquireEasy() {
  if (!idle_easy_.empty()) {
    UniqueCurlEasy e = std::move(idle_easy_.back());
    idle_easy_.pop_back();
    return e;
  }
  UniqueCurlEasy e(curl_easy_init());
  if (e == nullptr) return absl::ResourceExhaustedError("curl_easy_init failed");
  CurlOptions o(e.get());
  o.Set(CURLOPT_NOSIGNAL, 1L, "CURLOPT_NOSIGNAL");
  o.Set(CURLOPT_PROTOCOLS_STR, "http,https", "CURLOPT_PROTOCOLS_STR");
  o.Set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms),
        "CURLOPT_CONNECTTIMEOUT_MS");
  o.Set(CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout_ms), "CURLOPT_TIMEOUT_MS");
  o.Set(CURLOPT_WRITEFUNCTION, &WriteBody, "CURLOPT_WRITEFUNCTION");
  o.Set(CURLOPT_HEADERFUNCTION, &TakeHeaderLine, "CURLOPT_HEADERFUNCTION");
  o.Set(CURLOPT_BUFFERSIZE, kReceiveBufferBytes, "CURLOPT_BUFFERSIZE");
  RETURN_IF_ERROR(o.status());
  return e;
}

// Gives r's easy handle (out of the multi handle already) back to the pool,
// and frees its headers.
void RemoteReader::Impl::ReleaseEasy(Request* r) {
  if (r->easy != nullptr && idle_easy_.size() < kMaxIdleEasy) {
    idle_easy_.push_back(std::move(r->easy));
  }
  r->easy.reset();
  r->headers.reset();
}

void RemoteReader::Impl::Finished(CURL* easy, CURLcode code, std::mt19937_64* rng) {
  auto it = active_.find(easy);
  if (it == active_.end()) return;
  RequestPtr r = std::move(it->second);
  active_.erase(it);
  RemoveFromMulti(multi_.get(), easy);
  --HostFor(r->host).active;
  if (r->http_status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->http_status);
  {
    AttemptEnd end;
    end.status = r->http_status;
    curl_off_t connect_us = 0, first_byte_us = 0;
    curl_easy_getinfo(easy, CURLINFO_CONNECT_TIME_T, &connect_us);
    curl_easy_getinfo(easy, CURLINFO_STARTTRANSFER_TIME_T, &first_byte_us);
    end.connect_ns = static_cast<uint64_t>(std::max<curl_off_t>(0, connect_us)) * 1000;
    end.first_byte_ns = static_cast<uint64_t>(std::max<curl_off_t>(0, first_byte_us)) * 1000;
    end.connect_failed = code == CURLE_COULDNT_CONNECT || (code == CURLE_OPERATION_TIMEDOUT &&
                                                           connect_us == 0 && r->http_status == 0);
    end.congestion = IsCongestionCurlCode(code) || IsCongestionStatus(r->http_status);
    EndAttempt(*r, end);
  }
  if (r->head && code == CURLE_OK) {
    curl_off_t len = -1;
    curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
    r->size = len < 0 ? 0 : static_cast<uint64_t>(len);
    if (len < 0 && r->http_status < 300) {
      return Complete(r, absl::FailedPreconditionError(
                             absl::StrCat("HEAD ", r->name, ": the answer has no Content-Length")));
    }
    if (len > 0 && r->http_status >= 200 && r->http_status < 300 &&
        (known_sizes_.size() < kMaxKnownSizes || known_sizes_.count(r->full_url) != 0)) {
      known_sizes_[r->full_url] = r->size;
    }
  }
  if (!r->answer_error.empty()) {
    // Not the answer asked (another range): dropped unread, like a cut one.
    const std::string error = r->answer_error;
    return Conclude(r, error, /*retryable=*/true, rng);
  }
  if (code == CURLE_OK && !r->target.empty() && r->http_status >= 200 && r->http_status < 300) {
    if (direct_ != nullptr) direct_->LearnFrom(*r, easy);
  }
  const std::string error = code == CURLE_OK ? "" : curl_easy_strerror(code);
  Conclude(r, error, code != CURLE_OK && IsRetryableCurlCode(code), rng);
}

}  // namespace conveyor::remote
