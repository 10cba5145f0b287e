// DirectHttpPath: the remote reader's optional second way to make plain
// http:// GETs, beside libcurl (remote.direct_http, off by default). The
// reader's I/O loop knows only this interface: it offers each plain GET to
// the path (TryStart), tells it where libcurl reached a host (LearnFrom) and
// collects what ended (TakeFinished). The one implementation,
// MakeHttp1DirectPath, drives the project's own HTTP/1.1 client
// (remote/http1_client.h) on the reader's epoll loop and receives each body
// straight into the request's buffer (a run's: into each part's). Measured
// against libcurl side by side, it saves about half of the I/O thread's CPU
// per image over single files and 13-21% over tar runs (bench/README.md,
// "Direct client vs libcurl, side by side").
//
// Thread-safety: every method but requests() belongs to the reader's I/O
// thread (the thread that drives the epoll driver); requests() may be read
// from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <curl/curl.h>

#include "remote/curl_epoll_driver.h"
#include "remote/remote_options.h"
#include "remote/remote_request.h"
#include "remote/url.h"

namespace conveyor::remote {

class DirectHttpPath {
 public:
  // A transfer of the path that ended.
  struct Outcome {
    RequestPtr request;
    // The path will not serve the request's host (it sent an answer the
    // path leaves to libcurl): send the request again through libcurl, as
    // the same attempt.
    bool to_libcurl = false;
    // "" = an answer came (request->http_status, its body or too_large set);
    // else why none did (always worth a retry).
    std::string transport_error;
  };

  virtual ~DirectHttpPath() = default;

  // Starts `r` (a plain GET with a request target) when the path knows its
  // host; false: libcurl's. `r`'s transfer state was reset by the caller.
  virtual bool TryStart(const RequestPtr& r) = 0;
  // libcurl had a whole 2xx answer to `r` over `easy`: where it reached the
  // host (HTTP/1.x only), for the path's requests to come.
  virtual void LearnFrom(const Request& r, CURL* easy) = 0;
  // The earliest deadline of a transfer in flight (MonotonicNanos; max: none).
  virtual uint64_t NextDeadline() const = 0;
  // Applies the deadlines due by `now_ns` and appends the transfers that
  // ended to `out`.
  virtual void TakeFinished(uint64_t now_ns, std::vector<Outcome>* out) = 0;
  virtual size_t in_flight() const = 0;
  // The requests in flight, given up (the reader stops).
  virtual std::vector<RequestPtr> Abandon() = 0;
  // Requests started so far (any thread).
  virtual uint64_t requests() const = 0;
};

// The path and query of a plain http:// URL, as a request target, or ""
// when the URL is one for libcurl only (credentials in it, a fragment,
// bytes a request line cannot carry as they are).
std::string DirectTarget(std::string_view object, const ObjectUrl& url);
// Whether the environment sends plain HTTP through a proxy (libcurl obeys
// http_proxy / all_proxy; the direct path does not speak to proxies).
bool ProxyConfigured();

// The path over the project's HTTP/1.1 client, its sockets on `driver`'s
// epoll (which must outlive it); timeouts and pool sizes from `options`.
std::unique_ptr<DirectHttpPath> MakeHttp1DirectPath(CurlEpollDriver* driver,
                                                    const RemoteOptions& options);

}  // namespace conveyor::remote
