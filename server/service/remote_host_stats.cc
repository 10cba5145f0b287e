#include "server/service/remote_host_stats.h"

#include <set>

#include "core/data/tar_shard_source.h"
#include "remote/cached_object_reader.h"
#include "remote/cached_output_store.h"
#include "remote/cached_shard_reader.h"
#include "remote/host_stats.h"
#include "remote/object_cache.h"
#include "remote/relaid_jpeg_source.h"
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
    if (const auto* c = dynamic_cast<const remote::CachedShardReader*>(tar->reader().get())) {
      return c->remote().get();
    }
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

void SetObjectCacheStats(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
                         v1::GetStatsResponse* out) {
  std::set<const remote::ObjectCache*> caches;
  std::set<const remote::Relayer*> relayers;
  std::string dir;
  for (const auto& p : pipelines) {
    if (p == nullptr) continue;
    const remote::ObjectCache* cache = nullptr;
    if (const auto* relaid = dynamic_cast<const remote::RelaidJpegSource*>(p->source.get())) {
      cache = relaid->cache().get();
      relayers.insert(relaid->relayer().get());
    } else if (const auto* urls = dynamic_cast<const remote::UrlSampleSource*>(p->source.get())) {
      if (urls->cached() != nullptr) cache = urls->cached()->cache().get();
    } else if (const auto* tar = dynamic_cast<const TarShardSource*>(p->source.get())) {
      if (const auto* c = dynamic_cast<const remote::CachedShardReader*>(tar->reader().get())) {
        cache = c->cache().get();
      }
    }
    if (cache != nullptr) {
      caches.insert(cache);
      dir = cache->options().dir;
    }
    // Output kept in the node cache (cache_output with the daemon's cache).
    if (p->output_cache != nullptr) {
      if (const auto* store =
              dynamic_cast<const remote::CachedOutputStore*>(p->output_cache->store().get())) {
        caches.insert(store->cache().get());
        dir = store->cache()->options().dir;
      }
    }
  }
  if (caches.empty()) return;
  v1::ObjectCacheStats* o = out->mutable_object_cache();
  o->set_dir(dir);
  for (const remote::Relayer* r : relayers) {
    const remote::Relayer::Counters n = r->counters();
    o->set_relaid_made(o->relaid_made() + n.made);
    o->set_relaid_refused(o->relaid_refused() + n.refused);
    o->set_relaid_dropped(o->relaid_dropped() + n.dropped);
  }
  for (const remote::ObjectCache* c : caches) {
    const remote::ObjectCache::Counters n = c->counters();
    o->set_hits(o->hits() + n.hits);
    o->set_misses(o->misses() + n.misses);
    o->set_bytes_from_cache(o->bytes_from_cache() + n.bytes_from_cache);
    o->set_bytes_from_network(o->bytes_from_network() + n.bytes_from_network);
    o->set_evictions(o->evictions() + n.evictions);
    o->set_fills(o->fills() + n.fills);
    o->set_bytes_held(o->bytes_held() + n.bytes_held);
    o->set_entries(o->entries() + n.entries);
    o->set_max_bytes(o->max_bytes() + c->options().max_bytes);
    o->set_read_only(o->read_only() || n.read_only);
  }
}

}  // namespace conveyor::server
