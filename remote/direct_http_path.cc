// Transfers through the direct HTTP/1.1 client (RemoteReader::Impl,
// remote/remote_reader_impl.h; the client itself: remote/http1_client.h):
// which requests may go direct, where a host is reached (the address
// libcurl last reached it at), starting a GET with its body going straight
// into the request's buffer, and the end of one. All on the I/O thread but
// DirectTarget and ProxyConfigured (pure).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/base/text_escape.h"
#include "core/engine/stats.h"
#include "remote/remote_reader_impl.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

// How long the address libcurl reached a host at is used by the direct
// HTTP client (then the next request goes through libcurl, which resolves
// the name again): a name's address may move.
constexpr uint64_t kDirectAddressTtlNs = 60'000'000'000ull;

}  // namespace

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

// The direct client's way to `host`, when libcurl has reached it lately
// and it has sent nothing the client leaves to libcurl; else null.
const RemoteReader::Impl::DirectHost* RemoteReader::Impl::DirectHostOf(const std::string& host) const {
  auto it = direct_hosts_.find(host);
  if (it == direct_hosts_.end() || it->second.refused || it->second.address_len == 0) {
    return nullptr;  // (an entry made by a refusal, or by an answer with no usable address)
  }
  if (MonotonicNanos() - it->second.learned_ns > kDirectAddressTtlNs) return nullptr;
  return &it->second;
}

// A plain GET through the direct client, its body received into r->body.
void RemoteReader::Impl::StartDirect(const RequestPtr& r, const DirectHost& d) {
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
void RemoteReader::Impl::LearnAddress(const Request& r, CURL* easy) {
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
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&address); inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
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

// A direct client's transfer ended.
void RemoteReader::Impl::FinishedDirect(Http1Get* g, std::mt19937_64* rng) {
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
        spdlog::info("remote: {}: the direct HTTP client leaves its answers to libcurl from "
                     "now on: {}",
                     EscapeText(r->host), g->error);
      }
      d.refused = true;
      --r->attempt;
      hosts_[r->host].queue.push_front(std::move(r));
      return;
    }
    case Http1Get::Result::kFailed:
    case Http1Get::Result::kTimedOut:
      return Conclude(r, g->error, /*retryable=*/true, rng);
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

}  // namespace conveyor::remote
