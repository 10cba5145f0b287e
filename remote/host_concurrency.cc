#include "remote/host_concurrency.h"

#include <algorithm>

namespace conveyor::remote {

HostConcurrency::HostConcurrency(uint32_t max_limit, bool adaptive)
    : max_limit_(std::max<uint32_t>(1, max_limit)),
      adaptive_(adaptive),
      limit_(adaptive ? std::min(kInitialLimit, max_limit_) : max_limit_) {}

bool HostConcurrency::OnAnswer(uint64_t started_ns, uint64_t first_byte_ns, uint64_t connect_ns) {
  if (!adaptive_) return false;
  if (connect_ns >= kSlowConnectNs) return OnCongestion(started_ns, started_ns + connect_ns);
  ++window_answers_;
  window_latency_sum_ns_ += first_byte_ns;
  if (window_answers_ < limit_) return false;
  const uint64_t mean = window_latency_sum_ns_ / window_answers_;
  const bool limited = window_limited_;
  window_answers_ = 0;
  window_latency_sum_ns_ = 0;
  window_limited_ = false;
  if (best_window_ns_ == 0 || mean < best_window_ns_) best_window_ns_ = std::max<uint64_t>(mean, 1);
  if (limited && limit_ < max_limit_ &&
      static_cast<double>(mean) <= kLatencyFactor * static_cast<double>(best_window_ns_)) {
    ++limit_;
  }
  return false;
}

bool HostConcurrency::OnCongestion(uint64_t started_ns, uint64_t now_ns) {
  if (!adaptive_) return false;
  // Started under the limit before the last drop: already answered for.
  if (decreased_ && started_ns < decreased_at_ns_) return false;
  const uint32_t before = limit_;
  limit_ = std::max<uint32_t>(1, limit_ / 2);
  decreased_ = true;
  decreased_at_ns_ = now_ns;
  window_answers_ = 0;
  window_latency_sum_ns_ = 0;
  window_limited_ = false;
  if (limit_ == before) return false;
  ++decreases_;
  return true;
}

}  // namespace conveyor::remote
