#include "server/ops/metrics_exposition.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"

namespace conveyor::server {

namespace {

using Label = std::pair<std::string_view, std::string_view>;

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
    // Sorted, so that a scrape is stable whatever the map's order.
    const std::map<std::string, uint64_t> by_reason(st.failures_by_reason().begin(),
                                                    st.failures_by_reason().end());
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
  RenderReloads(s, &w);
  return w.Take();
}

}  // namespace conveyor::server
