#include "server/service/remote_host_stats.h"

#include <set>

#include "core/data/tar_shard_source.h"
#include "remote/host_stats.h"
#include "remote/remote_reader.h"
#include "remote/url_sample_source.h"

namespace conveyor::server {

namespace {

// The remote reader a pipeline's source reads through, or null.
const remote::RemoteReader* ReaderOf(const SampleSource* source) {
  if (const auto* urls = dynamic_cast<const remote::UrlSampleSource*>(source)) {
    return urls->reader().get();
  }
  if (const auto* tar = dynamic_cast<const TarShardSource*>(source)) {
    return dynamic_cast<const remote::RemoteReader*>(tar->reader().get());
  }
  return nullptr;
}

void ToProto(const remote::HostStats& s, v1::RemoteHostStats* o) {
  o->set_host(s.host);
  for (const auto& [status, n] : s.attempts_by_status) {
    v1::RemoteStatusCount* c = o->add_attempts();
    c->set_status(static_cast<uint32_t>(status));
    c->set_count(n);
  }
  o->set_retries(s.retries);
  o->set_connect_failures(s.connect_failures);
  o->set_slow_connects(s.slow_connects);
  o->set_bytes(s.bytes);
  for (const double b : remote::HostStats::kLatencyBoundsSeconds) o->add_latency_bounds_seconds(b);
  for (const uint64_t n : s.latency_buckets) o->add_latency_counts(n);
  o->set_latency_sum_ns(s.latency_sum_ns);
  o->set_in_flight(s.in_flight);
  o->set_queued(s.queued);
  o->set_connection_limit(s.connection_limit);
  o->set_max_connections(s.max_connections);
  o->set_limit_decreases(s.limit_decreases);
  o->set_adaptive(s.adaptive);
}

}  // namespace

void AppendRemoteHostStats(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
                           v1::GetStatsResponse* out) {
  // Pipelines of one config share its reader: each reader once.
  std::set<const remote::RemoteReader*> readers;
  for (const auto& p : pipelines) {
    if (p == nullptr) continue;
    if (const remote::RemoteReader* r = ReaderOf(p->source.get())) readers.insert(r);
  }
  if (readers.empty()) return;
  std::vector<std::vector<remote::HostStats>> parts;
  for (const remote::RemoteReader* r : readers) parts.push_back(r->host_stats());
  for (const remote::HostStats& s : remote::MergeHostStats(parts)) {
    ToProto(s, out->add_remote_hosts());
  }
}

}  // namespace conveyor::server
