// HostStats: what the remote reader did with one host (the per-host remote
// figures of GetStats and the conveyor_remote_* metrics): attempts by HTTP
// status, retries, connection failures, bytes, a latency histogram, and the
// host's connection limit (remote/host_concurrency.h) and transfers in
// flight now. Counters run from the reader's start (a reload that makes a
// new reader starts them again).
//
// Thread-safety: plain values; HostStatsTable is safe for concurrent use
// (the I/O thread records, any thread takes a snapshot).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/mutex.h"

namespace conveyor::remote {

struct HostStats {
  // Upper bounds (seconds) of the latency histogram's buckets; a last,
  // unbounded bucket follows.
  static constexpr std::array<double, 14> kLatencyBoundsSeconds = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  std::string host;  // host[:port] as in the URLs
  // Attempts (retries included) by the HTTP status of their answer; 0: the
  // attempt ended without one (a connection refused, reset or timed out).
  std::map<long, uint64_t> attempts_by_status;
  uint64_t retries = 0;           // attempts made again after a failure
  uint64_t connect_failures = 0;  // connections refused or timed out while connecting
  uint64_t slow_connects = 0;     // connects of ≥ HostConcurrency::kSlowConnectNs (SYN retried)
  uint64_t bytes = 0;             // body bytes received
  // Latency of attempts (start to end), non-cumulative counts per bucket
  // of kLatencyBoundsSeconds, then the unbounded one.
  std::array<uint64_t, kLatencyBoundsSeconds.size() + 1> latency_buckets{};
  uint64_t latency_sum_ns = 0;
  uint64_t in_flight = 0;         // transfers in flight now
  uint64_t queued = 0;            // requests waiting for a place now
  uint32_t connection_limit = 0;  // transfers allowed in flight now
  uint32_t max_connections = 0;   // remote.max_connections_per_host (the limit's cap)
  uint64_t limit_decreases = 0;   // times the limit was halved
  bool adaptive = false;          // remote.adaptive_connections

  // One attempt's end: `status` its answer's (0: none), `latency_ns` start to end.
  void RecordAttempt(long status, uint64_t latency_ns, uint64_t body_bytes);
  // Adds another reader's (or I/O thread's) figures of the same host.
  void Merge(const HostStats& other);
};

// The hosts of one I/O thread, by name.
class HostStatsTable {
 public:
  // Runs `f(HostStats*)` on `host`'s entry (made on first use) under the lock.
  template <typename F>
  void Update(const std::string& host, F&& f) {
    MutexLock lock(&mu_);
    auto [it, fresh] = hosts_.try_emplace(host);
    if (fresh) it->second.host = host;
    f(&it->second);
  }
  std::vector<HostStats> Snapshot() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, HostStats> hosts_ ABSL_GUARDED_BY(mu_);
};

// `parts` merged by host (sorted by host).
std::vector<HostStats> MergeHostStats(const std::vector<std::vector<HostStats>>& parts);

}  // namespace conveyor::remote
