#include "server/ops/metrics_exposition.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

namespace {

using Label = std::pair<std::string_view, std::string_view>;

// The lower-case names of every status code but OK, in the codes' order:
// the reasons a stage's item may fail with, and the codes a stream may be
// refused with. Their series exist from the start, zeros included, so that
// rate() and increase() see a failure's first occurrence.
const std::vector<std::string>& ErrorCodeNames() {
  static const std::vector<std::string>* const names = [] {
    auto* v = new std::vector<std::string>;
    for (int c = 1; c <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++c) {
      v->push_back(
          absl::AsciiStrToLower(absl::StatusCodeToString(static_cast<absl::StatusCode>(c))));
    }
    return v;
  }();
  return *names;
}

// Appends families in order: a HELP and TYPE line, then its samples.
class Writer {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    for (std::string_view part : {std::string_view("# HELP "), name, std::string_view(" "), help,
                                  std::string_view("\n# TYPE "), name, std::string_view(" "), type,
                                  std::string_view("\n")}) {
      out_.append(part);
    }
    family_ = name;
  }
  void Sample(std::initializer_list<Label> labels, uint64_t value) {
    Line(labels, absl::StrCat(value));
  }
  // A sample of the family under another name (a histogram's _bucket,
  // _sum and _count lines).
  void SampleOf(std::string_view suffix, std::initializer_list<Label> labels,
                const std::string& value) {
    const std::string_view family = family_;
    const std::string name = std::string(family) + std::string(suffix);
    family_ = name;
    Line(labels, value);
    family_ = family;
  }
  // Nanoseconds as seconds, exactly (nine decimals).
  void Seconds(std::initializer_list<Label> labels, uint64_t ns) {
    Line(labels, absl::StrFormat("%d.%09d", ns / 1000000000u, ns % 1000000000u));
  }
  std::string Take() { return std::move(out_); }

 private:
  void Line(std::initializer_list<Label> labels, const std::string& value) {
    out_.append(family_);
    if (labels.size() != 0) {
      out_.push_back('{');
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) out_.push_back(',');
        out_.append(k);
        out_.append("=\"");
        out_.append(PrometheusLabelValue(v));
        out_.push_back('"');
        first = false;
      }
      out_.push_back('}');
    }
    absl::StrAppend(&out_, " ", value, "\n");
  }

  std::string out_;
  std::string_view family_;
};

// The per-stage families, one sample per stage of the daemon-wide totals.
void RenderStages(const v1::GetStatsResponse& s, Writer* w) {
  const auto& stages = s.stages();
  w->Family("conveyor_stage_items_in_total", "counter",
            "Items that entered the stage (samples; batches for collate and deliver; epochs for "
            "sample), all streams since the daemon started.");
  for (const auto& st : stages) w->Sample({{"stage", st.name()}}, st.items_in());
  w->Family("conveyor_stage_items_out_total", "counter",
            "Items the stage completed successfully, all streams since the daemon started.");
  for (const auto& st : stages) w->Sample({{"stage", st.name()}}, st.items_out());
  w->Family("conveyor_stage_failures_total", "counter",
            "Failed items of the stage by reason (the status code of the failure), all streams "
            "since the daemon started.");
  for (const auto& st : stages) {
    // Sorted, so that a scrape is stable whatever the map's order; every
    // known reason present, zeros included.
    std::map<std::string, uint64_t> by_reason(st.failures_by_reason().begin(),
                                              st.failures_by_reason().end());
    for (const std::string& reason : ErrorCodeNames()) by_reason.emplace(reason, 0);
    for (const auto& [reason, n] : by_reason) {
      w->Sample({{"stage", st.name()}, {"reason", reason}}, n);
    }
  }
  w->Family("conveyor_stage_busy_seconds_total", "counter",
            "Worker time spent running the stage's tasks, summed over workers.");
  for (const auto& st : stages) w->Seconds({{"stage", st.name()}}, st.busy_ns());
  w->Family("conveyor_stage_waiting_seconds_total", "counter",
            "Time the stage of a stream had no input to work on (waiting_for=input) or input but "
            "no room for its output (waiting_for=output), summed over streams.");
  for (const auto& st : stages) {
    w->Seconds({{"stage", st.name()}, {"waiting_for", "input"}}, st.wait_input_ns());
    w->Seconds({{"stage", st.name()}, {"waiting_for", "output"}}, st.wait_output_ns());
  }
  w->Family("conveyor_stage_queue_items", "gauge",
            "Items waiting in front of the stage now, open streams summed.");
  for (const auto& st : stages) w->Sample({{"stage", st.name()}}, st.queue_size());
  w->Family("conveyor_stage_queue_capacity_items", "gauge",
            "Bound of the queue in front of the stage, open streams summed (0: no queue).");
  for (const auto& st : stages) w->Sample({{"stage", st.name()}}, st.queue_capacity());
  w->Family("conveyor_stage_tasks_in_flight", "gauge", "Tasks of the stage running now.");
  for (const auto& st : stages) w->Sample({{"stage", st.name()}}, st.in_flight());
}

void RenderDeliveries(const v1::GetStatsResponse& s, Writer* w) {
  struct Family {
    const char* name;
    const char* help;
    uint64_t (v1::DeliveryStats::*value)() const;
  };
  const Family families[] = {
      {"conveyor_delivered_batches_total", "Batches handed to clients, by pipeline and transport.",
       &v1::DeliveryStats::batches},
      {"conveyor_delivered_images_total",
       "Images (samples) in the batches handed to clients, by pipeline and transport.",
       &v1::DeliveryStats::images},
      {"conveyor_delivered_bytes_total",
       "Image bytes of the batches handed to clients, by pipeline and transport.",
       &v1::DeliveryStats::bytes},
  };
  for (const Family& f : families) {
    w->Family(f.name, "counter", f.help);
    for (const v1::DeliveryStats& d : s.deliveries()) {
      w->Sample({{"pipeline", d.pipeline()}, {"transport", d.transport()}}, (d.*f.value)());
    }
  }
}

// Refused streams by code, and the clients' data wait per pipeline.
void RenderClients(const v1::GetStatsResponse& s, Writer* w) {
  w->Family("conveyor_streams_refused_total", "counter",
            "StreamBatches calls refused before their stream opened, by status code (lower "
            "case): bad requests, refused clients, limits (resource_exhausted), shutdown "
            "(unavailable).");
  std::map<std::string, uint64_t> refused(s.streams_refused_by_code().begin(),
                                          s.streams_refused_by_code().end());
  for (const std::string& code : ErrorCodeNames()) refused.emplace(code, 0);
  for (const auto& [code, n] : refused) w->Sample({{"code", code}}, n);

  w->Family("conveyor_client_data_wait_seconds", "histogram",
            "How long clients waited for a batch: from the moment the client had a free credit "
            "until the daemon handed it the batch, per pipeline.");
  for (const v1::DataWaitStats& d : s.data_wait()) {
    uint64_t cumulative = 0;
    for (int b = 0; b < d.bucket_counts_size(); ++b) {
      cumulative += d.bucket_counts(b);
      const std::string le =
          b < d.bucket_upper_ns_size() ? absl::StrCat(d.bucket_upper_ns(b) / 1e9) : "+Inf";
      w->SampleOf("_bucket", {{"pipeline", d.pipeline()}, {"le", le}}, absl::StrCat(cumulative));
    }
    w->SampleOf("_sum", {{"pipeline", d.pipeline()}},
                absl::StrFormat("%d.%09d", d.sum_ns() / 1000000000u, d.sum_ns() % 1000000000u));
    w->SampleOf("_count", {{"pipeline", d.pipeline()}}, absl::StrCat(cumulative));
  }
  w->Family("conveyor_client_starved_seconds_total", "counter",
            "Time clients waited for batches, summed over their batches, per pipeline (the sum "
            "of conveyor_client_data_wait_seconds).");
  for (const v1::DataWaitStats& d : s.data_wait())
    w->Seconds({{"pipeline", d.pipeline()}}, d.sum_ns());
}

// The remote reader's figures per host (GetStatsResponse.remote_hosts):
// hosts come from the config's datasets, so the label set is bounded.
// Nothing without remote hosts (a daemon of local datasets only).
void RenderRemoteHosts(const v1::GetStatsResponse& s, Writer* w) {
  const auto& hosts = s.remote_hosts();
  if (hosts.empty()) return;
  w->Family("conveyor_remote_requests_total", "counter",
            "Remote request attempts (retries included) by host and HTTP status of the answer "
            "(code=\"none\": no answer: refused, reset, timed out).");
  for (const v1::RemoteHostStats& h : hosts) {
    for (const v1::RemoteStatusCount& c : h.attempts()) {
      const std::string code = c.status() == 0 ? "none" : absl::StrCat(c.status());
      w->Sample({{"host", h.host()}, {"code", code}}, c.count());
    }
  }
  struct PerHost {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (v1::RemoteHostStats::*value)() const;
  };
  const PerHost families[] = {
      {"conveyor_remote_retries_total", "counter", "Remote attempts made again after a failure.",
       &v1::RemoteHostStats::retries},
      {"conveyor_remote_connect_failures_total", "counter",
       "Remote connections refused or timed out while connecting.",
       &v1::RemoteHostStats::connect_failures},
      {"conveyor_remote_slow_connects_total", "counter",
       "Remote connects that took 0.9 s or more (a SYN sent again: the host's listen backlog "
       "overflowed).",
       &v1::RemoteHostStats::slow_connects},
      {"conveyor_remote_bytes_total", "counter", "Body bytes received from the host.",
       &v1::RemoteHostStats::bytes},
      {"conveyor_remote_connection_limit_decreases_total", "counter",
       "Times the host's limit of transfers in flight was halved (remote.adaptive_connections).",
       &v1::RemoteHostStats::limit_decreases},
      {"conveyor_remote_in_flight", "gauge", "Remote transfers in flight to the host now.",
       &v1::RemoteHostStats::in_flight},
      {"conveyor_remote_queued", "gauge", "Remote requests waiting for a place on the host now.",
       &v1::RemoteHostStats::queued},
  };
  for (const PerHost& f : families) {
    w->Family(f.name, f.type, f.help);
    for (const v1::RemoteHostStats& h : hosts) w->Sample({{"host", h.host()}}, (h.*f.value)());
  }
  w->Family("conveyor_remote_connection_limit", "gauge",
            "Remote transfers allowed in flight to the host now (adaptive up to "
            "remote.max_connections_per_host, or that fixed).");
  for (const v1::RemoteHostStats& h : hosts) w->Sample({{"host", h.host()}}, h.connection_limit());
  w->Family("conveyor_remote_request_seconds", "histogram",
            "Latency of remote request attempts (start to end), by host.");
  for (const v1::RemoteHostStats& h : hosts) {
    uint64_t cumulative = 0;
    for (int i = 0; i < h.latency_counts_size(); ++i) {
      cumulative += h.latency_counts(i);
      const std::string le = i < h.latency_bounds_seconds_size()
                                 ? absl::StrCat(h.latency_bounds_seconds(i))
                                 : std::string("+Inf");
      w->SampleOf("_bucket", {{"host", h.host()}, {"le", le}}, absl::StrCat(cumulative));
    }
    const uint64_t ns = h.latency_sum_ns();
    w->SampleOf("_sum", {{"host", h.host()}},
                absl::StrFormat("%d.%09d", ns / 1000000000u, ns % 1000000000u));
    w->SampleOf("_count", {{"host", h.host()}}, absl::StrCat(cumulative));
  }
}

// The node-local object cache (GetStatsResponse.object_cache); nothing
// without one.
void RenderObjectCache(const v1::GetStatsResponse& s, Writer* w) {
  if (!s.has_object_cache()) return;
  const v1::ObjectCacheStats& c = s.object_cache();
  w->Family("conveyor_cache_hits_total", "counter",
            "Reads of remote objects served from the node-local cache.");
  w->Sample({}, c.hits());
  w->Family("conveyor_cache_misses_total", "counter",
            "Reads of remote objects not served from the cache (fetched; concurrent misses of "
            "one object share one fetch).");
  w->Sample({}, c.misses());
  w->Family("conveyor_cache_bytes_total", "counter",
            "Bytes of remote objects served, by where from (cache or network).");
  w->Sample({{"source", "cache"}}, c.bytes_from_cache());
  w->Sample({{"source", "network"}}, c.bytes_from_network());
  w->Family("conveyor_cache_evictions_total", "counter",
            "Entries evicted from the cache for room (cache.eviction).");
  w->Sample({}, c.evictions());
  w->Family("conveyor_cache_bytes_held", "gauge", "Disk bytes the cache's entries hold now.");
  w->Sample({}, c.bytes_held());
  w->Family("conveyor_cache_entries", "gauge", "Objects the cache holds now.");
  w->Sample({}, c.entries());
  w->Family("conveyor_cache_read_only", "gauge",
            "1 when the cache's disk filled up and it keeps nothing new.");
  w->Sample({}, c.read_only() ? 1 : 0);
  w->Family("conveyor_cache_relaid_jpegs_total", "counter",
            "relay_jpeg: JPEGs re-laid into the cache (made), that could not be (refused), and "
            "not queued because the relayer's queue was full (dropped).");
  w->Sample({{"outcome", "made"}}, c.relaid_made());
  w->Sample({{"outcome", "refused"}}, c.relaid_refused());
  w->Sample({{"outcome", "dropped"}}, c.relaid_dropped());
}

// Config reloads (SIGHUP): applied and refused, and when the config last
// loaded (the start until a reload is applied). Both results always present.
void RenderReloads(const v1::GetStatsResponse& s, Writer* w) {
  w->Family("conveyor_config_reloads_total", "counter",
            "Config reloads (SIGHUP) since the daemon started, by result: success (applied) or "
            "failure (refused; the running config stayed).");
  w->Sample({{"result", "success"}}, s.config_reloads_succeeded());
  w->Sample({{"result", "failure"}}, s.config_reloads_failed());
  w->Family("conveyor_config_last_reload_success_timestamp_seconds", "gauge",
            "When the config last loaded successfully (the start, or the last applied reload), "
            "in seconds since the Unix epoch.");
  w->Seconds({}, s.config_last_reload_success_unix_ns());
}

// The output caches of the pipelines with cache_output: one series per
// such pipeline (none without one).
void RenderOutputCaches(const v1::GetStatsResponse& s, Writer* w) {
  if (s.output_caches().empty()) return;
  w->Family("conveyor_output_cache_hits_total", "counter",
            "Samples served from a pipeline's output cache (cache_output): nothing read or "
            "decoded.");
  for (const v1::OutputCacheStats& c : s.output_caches()) {
    w->Sample({{"pipeline", c.pipeline()}}, c.hits());
  }
  w->Family("conveyor_output_cache_misses_total", "counter",
            "Samples looked up in a pipeline's output cache and not held there.");
  for (const v1::OutputCacheStats& c : s.output_caches()) {
    w->Sample({{"pipeline", c.pipeline()}}, c.misses());
  }
  w->Family("conveyor_output_cache_evictions_total", "counter",
            "Samples dropped from a pipeline's output cache to make room.");
  for (const v1::OutputCacheStats& c : s.output_caches()) {
    w->Sample({{"pipeline", c.pipeline()}}, c.evictions());
  }
  w->Family("conveyor_output_cache_bytes", "gauge",
            "Bytes a pipeline's output cache holds now (outputs, keys, bookkeeping).");
  for (const v1::OutputCacheStats& c : s.output_caches()) {
    w->Sample({{"pipeline", c.pipeline()}}, c.bytes());
  }
  w->Family("conveyor_output_cache_capacity_bytes", "gauge",
            "The bound of a pipeline's output cache (cache_output_bytes).");
  for (const v1::OutputCacheStats& c : s.output_caches()) {
    w->Sample({{"pipeline", c.pipeline()}}, c.capacity_bytes());
  }
}

}  // namespace

std::string PrometheusLabelValue(std::string_view value) {
  const std::string text = EscapeText(value);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;  // EscapeText leaves none; kept for the format's sake
      default: out.push_back(c);
    }
  }
  return out;
}

std::string RenderPrometheusText(const v1::GetStatsResponse& s) {
  Writer w;
  w.Family("conveyor_uptime_seconds", "gauge", "Seconds since the engine started.");
  w.Seconds({}, s.uptime_ns());
  w.Family("conveyor_worker_threads", "gauge", "Worker threads of the engine.");
  w.Sample({}, s.num_threads());
  RenderStages(s, &w);
  w.Family("conveyor_streams_open", "gauge", "Streams open now.");
  w.Sample({}, s.streams_open());
  w.Family("conveyor_streams_opened_total", "counter", "Streams opened since the daemon started.");
  w.Sample({}, s.streams_total());
  uint64_t slots = 0, held = 0;
  for (const v1::StreamStats& st : s.streams()) {
    slots += st.slots_total();
    held += st.slots_held_by_client();
  }
  w.Family("conveyor_stream_slots", "gauge", "Batch slots of the open streams.");
  w.Sample({}, slots);
  w.Family("conveyor_stream_slots_held_by_clients", "gauge",
           "Batch slots handed to clients and not released yet.");
  w.Sample({}, held);
  // Fetches waiting on the network, per pipeline (streams are no label):
  // how many, and how long the oldest has waited, by host, so a stalled
  // host shows here.
  std::map<std::string, uint64_t> pending;
  std::map<std::pair<std::string, std::string>, uint64_t> oldest;
  for (const v1::StreamStats& st : s.streams()) {
    if (st.fetches_pending() == 0) continue;
    pending[st.pipeline()] += st.fetches_pending();
    if (!st.has_oldest_fetch()) continue;
    uint64_t& age = oldest[{st.pipeline(), st.oldest_fetch().host()}];
    age = std::max<uint64_t>(age, st.oldest_fetch().age_ns());
  }
  w.Family("conveyor_fetches_pending", "gauge",
           "Fetches of the open streams waiting on the network now.");
  for (const auto& [pipeline, n] : pending) w.Sample({{"pipeline", pipeline}}, n);
  w.Family("conveyor_oldest_fetch_age_seconds", "gauge",
           "How long the oldest pending fetch of the open streams has waited, by host.");
  for (const auto& [key, age] : oldest) {
    w.Seconds({{"pipeline", key.first}, {"host", key.second}}, age);
  }
  w.Family("conveyor_slot_memory_bytes", "gauge",
           "Slot memory reserved by the open streams (counted against memory_budget).");
  w.Sample({}, s.slot_bytes_in_use());
  w.Family("conveyor_slot_memory_budget_bytes", "gauge",
           "The daemon's memory_budget for batch slots.");
  w.Sample({}, s.slot_bytes_budget());
  RenderDeliveries(s, &w);
  RenderClients(s, &w);
  RenderRemoteHosts(s, &w);
  RenderObjectCache(s, &w);
  RenderReloads(s, &w);
  RenderOutputCaches(s, &w);
  return w.Take();
}

}  // namespace conveyor::server
