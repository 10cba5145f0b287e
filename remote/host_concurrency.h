// HostConcurrency: how many transfers the remote reader keeps in flight to
// one host (remote.adaptive_connections, config/README.md `remote`). An
// AIMD rule, as TCP's congestion window, over whole requests:
//
//  - Start at kInitialLimit (4), or max_connections_per_host if smaller.
//  - Additive increase: after a window of successful answers as long as
//    the limit (one "round" of the host's transfers), during which the host
//    was kept at the limit (requests waited for a place, so more places
//    would have been used), add one, up to max_connections_per_host — as
//    long as the window's mean time to first byte is within
//    kLatencyFactor (2) times the best window mean seen: a host whose
//    answers slow down as it gets more connections is saturated already,
//    and the limit holds.
//  - Multiplicative decrease: a congestion signal halves the limit (never
//    below 1): a connection that failed (refused, reset, timed out, closed
//    without an answer), a 503 or 429 answer, or a connect that took
//    kSlowConnectNs (900 ms) or longer (a SYN retransmitted after the
//    host's listen backlog overflowed: the kernel waits 1 s before the
//    second SYN). The requests in flight when the limit dropped were
//    started under the old limit, so their signals do not halve it again:
//    one halving per round, as TCP's fast recovery.
//  - With adaptive off, the limit is max_connections_per_host, fixed.
//
// Thread-safety: none (a plain value class); the reader's I/O thread owns
// each host's. Times are the caller's (MonotonicNanos), so tests drive it
// with simulated outcomes.
#pragma once

#include <cstdint>

namespace conveyor::remote {

class HostConcurrency {
 public:
  static constexpr uint32_t kInitialLimit = 4;
  static constexpr double kLatencyFactor = 2.0;
  static constexpr uint64_t kSlowConnectNs = 900'000'000;

  // REQUIRES: max_limit >= 1.
  HostConcurrency(uint32_t max_limit, bool adaptive);

  // Transfers allowed in flight now (1..max_limit).
  uint32_t limit() const { return limit_; }
  // Times the limit was halved so far.
  uint64_t decreases() const { return decreases_; }

  // A request could not start because the host is at its limit (it waits
  // in the host's queue): the window that is open counts as limited by us.
  void OnLimited() { window_limited_ = true; }
  // A transfer started at `started_ns` got an answer that is not a
  // congestion signal. `first_byte_ns`: from its start to the answer's
  // first byte; `connect_ns`: how long its connection took (0: reused).
  // True when the limit dropped (a slow connect).
  bool OnAnswer(uint64_t started_ns, uint64_t first_byte_ns, uint64_t connect_ns);
  // A transfer started at `started_ns` ended with a congestion signal (see
  // above) at `now_ns`. True when the limit dropped.
  bool OnCongestion(uint64_t started_ns, uint64_t now_ns);

 private:
  uint32_t max_limit_;  // (not const: a host's value is assigned once made)
  bool adaptive_;
  uint32_t limit_;
  uint64_t decreases_ = 0;
  // Transfers started before this (the last decrease) do not lower the
  // limit again; 0: none yet.
  uint64_t decreased_at_ns_ = 0;
  bool decreased_ = false;
  // The window of answers open now.
  uint32_t window_answers_ = 0;
  uint64_t window_latency_sum_ns_ = 0;
  bool window_limited_ = false;
  // The lowest mean time to first byte of a whole window (0: none yet).
  uint64_t best_window_ns_ = 0;
};

}  // namespace conveyor::remote
