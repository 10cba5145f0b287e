#include "remote/backoff.h"

#include <algorithm>

#include <curl/curl.h>

namespace conveyor::remote {

uint64_t BackoffPolicy::DelayNs(uint32_t retry, uint64_t random) const {
  uint64_t base = std::max<uint64_t>(initial_ns, 1);
  for (uint32_t i = 1; i < retry && base < max_ns; ++i) {
    base = base > max_ns / 2 ? max_ns : 2 * base;
  }
  base = std::min(base, max_ns);
  const uint64_t half = base / 2;
  const uint64_t span = base - half + 1;  // [half, base]
  return half + random % span;
}

bool IsRetryableHttpStatus(long status) { return status >= 500 || status == 429 || status == 408; }

bool IsRetryableCurlCode(int code) {
  switch (static_cast<CURLcode>(code)) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN: return true;
    default: return false;
  }
}

bool IsCongestionStatus(long status) { return status == 503 || status == 429; }

bool IsCongestionCurlCode(int code) {
  switch (static_cast<CURLcode>(code)) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR: return true;
    default: return false;
  }
}

}  // namespace conveyor::remote
