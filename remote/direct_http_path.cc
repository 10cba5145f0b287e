// The direct HTTP/1.1 path (remote/direct_http_path.h): which URLs may go
// direct, where a host is reached (the address libcurl last reached it at,
// for a minute), a GET's request head with its body going straight into the
// request's buffer (a run: each part's), and what an ended transfer means
// for the reader. All on the reader's I/O thread but DirectTarget,
// ProxyConfigured (pure) and requests() (atomic).
#include "remote/direct_http_path.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/base/text_escape.h"
#include "core/engine/stats.h"
#include "remote/http1_client.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

// How long the address libcurl reached a host at is used by the direct
// HTTP client (then the next request goes through libcurl, which resolves
// the name again): a name's address may move.
constexpr uint64_t kDirectAddressTtlNs = 60'000'000'000ull;

class Http1DirectPath final : public DirectHttpPath {
 public:
  Http1DirectPath(CurlEpollDriver* driver, const RemoteOptions& options)
      : options_(options), client_(driver, options.max_connections_per_host) {}

  bool TryStart(const RequestPtr& r) override;
  void LearnFrom(const Request& r, CURL* easy) override;
  uint64_t NextDeadline() const override { return client_.NextDeadline(); }
  void TakeFinished(uint64_t now_ns, std::vector<Outcome>* out) override;
  size_t in_flight() const override { return active_.size(); }
  std::vector<RequestPtr> Abandon() override;
  uint64_t requests() const override { return requests_.load(std::memory_order_relaxed); }

 private:
  // Where the client reaches a host: the address libcurl last reached it
  // at (its name resolution, checked by a whole answer).
  struct Host {
    sockaddr_storage address{};
    socklen_t address_len = 0;
    std::string pool;  // the address as text: the client's pool key
    uint64_t learned_ns = 0;
    bool refused = false;  // it sent an answer the client leaves to libcurl
  };

  // The way to `host`, when libcurl has reached it lately and it has sent
  // nothing the client leaves to libcurl; else null.
  const Host* HostOf(const std::string& host) const;
  Outcome Judge(RequestPtr r, Http1Get* g);

  const RemoteOptions options_;
  Http1Client client_;
  std::unordered_map<Http1Get*, RequestPtr> active_;
  std::unordered_map<std::string, Host> hosts_;
  std::vector<Http1Get*> done_;  // (reused by TakeFinished)
  std::atomic<uint64_t> requests_{0};
};

const Http1DirectPath::Host* Http1DirectPath::HostOf(const std::string& host) const {
  auto it = hosts_.find(host);
  if (it == hosts_.end() || it->second.refused || it->second.address_len == 0) {
    return nullptr;  // (an entry made by a refusal, or by an answer with no usable address)
  }
  if (MonotonicNanos() - it->second.learned_ns > kDirectAddressTtlNs) return nullptr;
  return &it->second;
}

bool Http1DirectPath::TryStart(const RequestPtr& r) {
  if (r->target.empty() || r->head) return false;
  const Host* d = HostOf(r->host);
  if (d == nullptr) return false;
  if (r->direct == nullptr) r->direct = std::make_unique<Http1Get>();
  Http1Get* g = r->direct.get();
  g->address = d->address;
  g->address_len = d->address_len;
  g->pool = d->pool;
  g->head = absl::StrCat("GET ", r->target, " HTTP/1.1\r\nHost: ", r->host,
                         "\r\nUser-Agent: conveyord\r\nAccept: */*\r\n");
  g->range_asked = r->length != kWhole;
  g->range_offset = r->offset;
  g->range_length = g->range_asked ? r->length : 0;
  g->object_size = r->known_size;
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
  active_.emplace(g, r);
  requests_.fetch_add(1, std::memory_order_relaxed);
  client_.Start(g);
  return true;
}

// After a whole answer from libcurl over plain HTTP/1.x: where it reached
// the host, for the direct client's requests to come.
void Http1DirectPath::LearnFrom(const Request& r, CURL* easy) {
  Host& d = hosts_[r.host];
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

void Http1DirectPath::TakeFinished(uint64_t now_ns, std::vector<Outcome>* out) {
  client_.ExpireDeadlines(now_ns);
  done_.clear();
  client_.TakeFinished(&done_);
  for (Http1Get* g : done_) {
    auto it = active_.find(g);
    if (it == active_.end()) continue;
    RequestPtr r = std::move(it->second);
    active_.erase(it);
    out->push_back(Judge(std::move(r), g));
  }
}

// What an ended transfer means: the answer's status and body on the request,
// a transport error, or the host given to libcurl.
DirectHttpPath::Outcome Http1DirectPath::Judge(RequestPtr r, Http1Get* g) {
  Outcome o;
  switch (g->result) {
    case Http1Get::Result::kUnsupported: {
      Host& d = hosts_[r->host];
      if (!d.refused) {
        spdlog::info(
            "remote: {}: the direct HTTP client leaves its answers to libcurl from "
            "now on: {}",
            EscapeText(r->host), g->error);
      }
      d.refused = true;
      o.to_libcurl = true;
      break;
    }
    case Http1Get::Result::kFailed:
    case Http1Get::Result::kTimedOut: o.transport_error = g->error; break;
    case Http1Get::Result::kTooLarge:
      r->http_status = g->status;
      r->too_large = true;
      break;
    case Http1Get::Result::kOk:
      r->http_status = g->status;
      if (g->status >= 300) {
        r->body = std::move(g->error_body);
      } else {
        r->received = r->parts.empty() ? r->body.size() : g->content_length;
      }
      break;
  }
  o.request = std::move(r);
  return o;
}

std::vector<RequestPtr> Http1DirectPath::Abandon() {
  std::vector<RequestPtr> left;
  for (auto& [get, r] : active_) left.push_back(r);
  active_.clear();  // (their sockets close with the client)
  return left;
}

}  // namespace

std::string DirectTarget(std::string_view object, const ObjectUrl& url) {
  if (url.scheme != ObjectUrl::Scheme::kHttp || AuthorityOf(object) != url.authority) return "";
  if (url.path.empty() || url.path.front() != '/') return "";
  for (unsigned char c : url.path) {
    if (c <= 0x20 || c >= 0x7f || c == '#') return "";
  }
  return url.path;
}

bool ProxyConfigured() {
  for (const char* name : {"http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return true;
  }
  return false;
}

std::unique_ptr<DirectHttpPath> MakeHttp1DirectPath(CurlEpollDriver* driver,
                                                    const RemoteOptions& options) {
  return std::make_unique<Http1DirectPath>(driver, options);
}

}  // namespace conveyor::remote
