// The retry policy of remote reads: which failures are worth another try
// (5xx and 429 answers, refused or reset connections, timeouts, failed name
// look-ups) and how long to wait before it (exponential backoff with jitter,
// so that many readers hit by one outage do not retry in step).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>

namespace conveyor::remote {

struct BackoffPolicy {
  uint32_t max_attempts = 5;  // tries in all, the first included (>= 1)
  uint64_t initial_ns = 100'000'000;
  uint64_t max_ns = 5'000'000'000;

  // The wait before retry number `retry` (1 = the second attempt): the base
  // min(max_ns, initial_ns × 2^(retry-1)), jittered uniformly into
  // [base/2, base] by `random` (any 64-bit value, e.g. from an RNG).
  uint64_t DelayNs(uint32_t retry, uint64_t random) const;
};

// Whether an HTTP answer with this status is worth retrying: 5xx, 429
// (too many requests) and 408 (request timeout). 4xx otherwise is the
// object's (missing, forbidden), final.
bool IsRetryableHttpStatus(long status);

// Whether a transfer that failed with this CURLcode (as int) is worth
// retrying: connection refused or reset, timeouts, empty or cut answers,
// failed DNS look-ups, TLS handshakes cut short.
bool IsRetryableCurlCode(int code);

// Whether an answer with this status says the host is overloaded (503,
// 429): a congestion signal for its connection limit (remote/host_concurrency.h).
bool IsCongestionStatus(long status);
// Whether a transfer that failed with this CURLcode (as int) is a
// congestion signal: the connection was refused, reset, timed out or closed
// without an answer (not a failed name look-up or a TLS error).
bool IsCongestionCurlCode(int code);

}  // namespace conveyor::remote
