// Transfers through libcurl (RemoteReader::Impl, remote/remote_reader_impl.h):
// the pool of easy handles, a transfer's options (URL, range, S3 signing),
// the write callback that takes the body straight into the request's buffer
// (a range cut out of a 200 answer, a run's bytes into each part) and the
// end of a transfer. All on the I/O thread.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/engine/stats.h"
#include "remote/backoff.h"
#include "remote/remote_reader_impl.h"

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

// A transfer of `r` through libcurl: an easy handle with its URL, range and
// (S3) signing, added to the multi handle.
void RemoteReader::Impl::StartCurl(const RequestPtr& r) {
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

// An easy handle with the settings every transfer shares: one kept from
// an earlier transfer (its receive buffer already allocated), else a new one.
CURL* RemoteReader::Impl::AcquireEasy() {
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
void RemoteReader::Impl::ReleaseEasy(Request* r) {
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

void RemoteReader::Impl::Finished(CURL* easy, CURLcode code, std::mt19937_64* rng) {
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

}  // namespace conveyor::remote
