#include "remote/host_stats.h"

#include <algorithm>

namespace conveyor::remote {

void HostStats::RecordAttempt(long status, uint64_t latency_ns, uint64_t body_bytes) {
  ++attempts_by_status[status];
  bytes += body_bytes;
  latency_sum_ns += latency_ns;
  const double seconds = static_cast<double>(latency_ns) / 1e9;
  const auto it =
      std::lower_bound(kLatencyBoundsSeconds.begin(), kLatencyBoundsSeconds.end(), seconds);
  ++latency_buckets[static_cast<size_t>(it - kLatencyBoundsSeconds.begin())];
}

void HostStats::Merge(const HostStats& o) {
  for (const auto& [status, n] : o.attempts_by_status) attempts_by_status[status] += n;
  retries += o.retries;
  connect_failures += o.connect_failures;
  slow_connects += o.slow_connects;
  bytes += o.bytes;
  for (size_t i = 0; i < latency_buckets.size(); ++i) latency_buckets[i] += o.latency_buckets[i];
  latency_sum_ns += o.latency_sum_ns;
  in_flight += o.in_flight;
  queued += o.queued;
  connection_limit += o.connection_limit;
  max_connections += o.max_connections;
  limit_decreases += o.limit_decreases;
  adaptive = adaptive || o.adaptive;
}

std::vector<HostStats> HostStatsTable::Snapshot() const {
  MutexLock lock(&mu_);
  std::vector<HostStats> out;
  out.reserve(hosts_.size());
  for (const auto& [name, s] : hosts_) out.push_back(s);
  return out;
}

std::vector<HostStats> MergeHostStats(const std::vector<std::vector<HostStats>>& parts) {
  std::map<std::string, HostStats> by_host;
  for (const std::vector<HostStats>& part : parts) {
    for (const HostStats& s : part) {
      auto [it, fresh] = by_host.try_emplace(s.host, s);
      if (!fresh) it->second.Merge(s);
    }
  }
  std::vector<HostStats> out;
  out.reserve(by_host.size());
  for (auto& [name, s] : by_host) out.push_back(std::move(s));
  return out;
}

}  // namespace conveyor::remote
