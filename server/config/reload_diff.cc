#include "server/config/reload_diff.h"

#include <map>

namespace conveyor::server {

namespace {

// Collects the names of fields that differ.
class Diff {
 public:
  template <typename T>
  void Field(const char* name, const T& a, const T& b) {
    if (!(a == b)) fields.emplace_back(name);
  }
  std::vector<std::string> fields;
};

bool SameTransform(const TransformSpec& a, const TransformSpec& b) {
  return a.kind == b.kind && a.video == b.video && a.audio == b.audio && a.mode == b.mode &&
         a.output_height == b.output_height && a.output_width == b.output_width &&
         a.layout == b.layout && a.dtype == b.dtype && a.mean == b.mean && a.std == b.std &&
         a.scale_min == b.scale_min && a.scale_max == b.scale_max && a.ratio_min == b.ratio_min &&
         a.ratio_max == b.ratio_max && a.flip_probability == b.flip_probability &&
         a.vflip_probability == b.vflip_probability &&
         a.grayscale_probability == b.grayscale_probability && a.image_ops == b.image_ops &&
         a.resize_size == b.resize_size && a.dct_scaling == b.dct_scaling &&
         a.max_pixels == b.max_pixels && a.max_decode_memory == b.max_decode_memory &&
         a.max_decode_seconds == b.max_decode_seconds;
}

}  // namespace

std::vector<std::string> ChangedRestartFields(const DaemonConfig& a, const DaemonConfig& b) {
  Diff d;
  const ListenConfig &la = a.listen, &lb = b.listen;
  d.Field("listen.unix", la.unix_path, lb.unix_path);
  d.Field("listen.unix_mode", la.unix_mode, lb.unix_mode);
  d.Field("listen.tcp", la.tcp, lb.tcp);
  d.Field("listen.data_tcp", la.data_tcp, lb.data_tcp);
  d.Field("listen.tls.cert", la.tls.cert, lb.tls.cert);
  d.Field("listen.tls.key", la.tls.key, lb.tls.key);
  d.Field("listen.tls.client_ca", la.tls.client_ca, lb.tls.client_ca);
  d.Field("listen.tls.require_client_cert", la.tls.require_client_cert, lb.tls.require_client_cert);
  d.Field("listen.tls.reload_interval_seconds", la.tls.reload_interval_seconds,
          lb.tls.reload_interval_seconds);
  d.Field("listen.allow_insecure_tcp", la.allow_insecure_tcp, lb.allow_insecure_tcp);
  d.Field("listen.allowed_uids", la.allowed_uids, lb.allowed_uids);
  d.Field("listen.allowed_gids", la.allowed_gids, lb.allowed_gids);
  d.Field("listen.operator_uids", la.operator_uids, lb.operator_uids);
  d.Field("listen.operator_gids", la.operator_gids, lb.operator_gids);
  // The tokens (their files read again) and require_token_on_unix apply
  // live, as long as some stay configured: whether there are any decides
  // the identifier chain and the TCP listener's checks, built at start.
  if (a.access.tokens.empty() != b.access.tokens.empty()) d.fields.emplace_back("access.tokens");
  const EngineOptions &ea = a.engine, &eb = b.engine;
  d.Field("threads", ea.num_threads, eb.num_threads);
  d.Field("engine.fetch_queue_capacity", ea.fetch_queue_capacity, eb.fetch_queue_capacity);
  d.Field("engine.fetch_queue_bytes", ea.fetch_queue_bytes, eb.fetch_queue_bytes);
  d.Field("engine.fetch_concurrency", ea.fetch_concurrency, eb.fetch_concurrency);
  d.Field("engine.decode_concurrency", ea.decode_concurrency, eb.decode_concurrency);
  d.Field("engine.autotune", ea.autotune, eb.autotune);
  d.Field("engine.autotune_max_fetch_concurrency", ea.autotune_max_fetch_concurrency,
          eb.autotune_max_fetch_concurrency);
  d.Field("engine.fetch_retry_max_attempts", ea.fetch_retry_max_attempts,
          eb.fetch_retry_max_attempts);
  d.Field("engine.fetch_retry_initial_backoff_ms", ea.fetch_retry_initial_backoff,
          eb.fetch_retry_initial_backoff);
  d.Field("engine.fetch_retry_max_backoff_ms", ea.fetch_retry_max_backoff,
          eb.fetch_retry_max_backoff);
  d.Field("engine.fetch_retry_deadline_seconds", ea.fetch_retry_deadline, eb.fetch_retry_deadline);
  d.Field("engine.cpu_budget", ea.cpu_budget, eb.cpu_budget);
  d.Field("memory_budget", a.memory_budget, b.memory_budget);
  d.Field("gpu_memory_budget", a.gpu_memory_budget, b.gpu_memory_budget);
  d.Field("max_streams", a.max_streams, b.max_streams);
  d.Field("log_format", a.log_format, b.log_format);
  d.Field("metrics.listen", a.metrics.listen, b.metrics.listen);
  d.Field("shutdown_timeout_seconds", a.shutdown_timeout_seconds, b.shutdown_timeout_seconds);
  d.Field("stream_idle_timeout_seconds", a.stream_idle_timeout_seconds,
          b.stream_idle_timeout_seconds);
  d.Field("per_client.max_streams", a.per_client.max_streams, b.per_client.max_streams);
  d.Field("per_client.max_credits", a.per_client.max_credits, b.per_client.max_credits);
  d.Field("per_client.max_memory", a.per_client.max_bytes, b.per_client.max_bytes);
  d.Field("per_client.weight", a.per_client.weight, b.per_client.weight);
  const remote::RemoteOptions &ra = a.remote, &rb = b.remote;
  d.Field("remote.max_connections_per_host", ra.max_connections_per_host,
          rb.max_connections_per_host);
  d.Field("remote.adaptive_connections", ra.adaptive_connections, rb.adaptive_connections);
  d.Field("remote.requests_per_second_per_host", ra.requests_per_second_per_host,
          rb.requests_per_second_per_host);
  d.Field("remote.connect_timeout_ms", ra.connect_timeout_ms, rb.connect_timeout_ms);
  d.Field("remote.request_timeout_ms", ra.request_timeout_ms, rb.request_timeout_ms);
  d.Field("remote.max_attempts", ra.max_attempts, rb.max_attempts);
  d.Field("remote.initial_backoff_ms", ra.initial_backoff_ms, rb.initial_backoff_ms);
  d.Field("remote.max_backoff_ms", ra.max_backoff_ms, rb.max_backoff_ms);
  d.Field("remote.failed_object", ra.failed_object, rb.failed_object);
  d.Field("remote.read_ahead_bytes", ra.read_ahead_bytes, rb.read_ahead_bytes);
  d.Field("remote.direct_http", ra.direct_http, rb.direct_http);
  d.Field("remote.io_threads", ra.io_threads, rb.io_threads);
  d.Field("remote.s3.endpoint", ra.s3_endpoint, rb.s3_endpoint);
  d.Field("remote.s3.region", ra.s3_region, rb.s3_region);
  d.Field("remote.s3.profile", ra.s3_profile, rb.s3_profile);
  // The object cache: one per folder for the process (server/config/loader.cc).
  d.Field("cache.dir", a.cache.dir, b.cache.dir);
  d.Field("cache.max_bytes", a.cache.max_bytes, b.cache.max_bytes);
  d.Field("cache.eviction", a.cache.eviction, b.cache.eviction);
  d.Field("cache.fsync", a.cache.fsync, b.cache.fsync);
  return d.fields;
}

bool SamePipelineDefinition(const PipelineSpec& a, const PipelineSpec& b) {
  const PipelineConfig &x = a.config, &y = b.config;
  return a.dataset.kind == b.dataset.kind && a.dataset.Key() == b.dataset.Key() &&
         a.cache == b.cache && a.relay_jpeg == b.relay_jpeg && x.name == y.name &&
         SameTransform(x.transform, y.transform) && x.error_policy == y.error_policy &&
         x.max_failure_rate == y.max_failure_rate &&
         x.failure_rate_min_samples == y.failure_rate_min_samples &&
         x.max_batch_size == y.max_batch_size && x.max_file_bytes == y.max_file_bytes &&
         x.cache_output == y.cache_output && x.cache_output_bytes == y.cache_output_bytes;
}

PipelineChanges ComparePipelines(const DaemonConfig& running, const DaemonConfig& next) {
  std::map<std::string, const PipelineSpec*> old;
  for (const PipelineSpec& p : running.pipelines) old.emplace(p.config.name, &p);
  std::map<std::string, const PipelineSpec*> now;
  for (const PipelineSpec& p : next.pipelines) now.emplace(p.config.name, &p);
  PipelineChanges c;
  for (const PipelineSpec& p : next.pipelines) {
    auto it = old.find(p.config.name);
    if (it == old.end()) {
      c.added.push_back(p.config.name);
    } else if (SamePipelineDefinition(*it->second, p)) {
      c.unchanged.push_back(p.config.name);
    } else {
      c.changed.push_back(p.config.name);
    }
  }
  for (const PipelineSpec& p : running.pipelines) {
    if (now.count(p.config.name) == 0) c.removed.push_back(p.config.name);
  }
  return c;
}

}  // namespace conveyor::server
