// The daemon's statistics in the Prometheus text exposition format (0.0.4),
// for the metrics endpoint (server/ops/metrics_http_server.h). It renders what
// ConveyorService::GetStats already collects — no bookkeeping of its own:
//
//   conveyor_stage_items_{in,out}_total{stage}         counters, all streams since start
//   conveyor_stage_failures_total{stage,reason}        reason: the status code, lower case;
//                                                      every stage x every non-OK code, 0 included
//   conveyor_stage_busy_seconds_total{stage}
//   conveyor_stage_waiting_seconds_total{stage,waiting_for="input"|"output"}
//   conveyor_stage_queue_items{stage}, conveyor_stage_queue_capacity_items{stage},
//   conveyor_stage_tasks_in_flight{stage}              gauges, open streams summed
//   conveyor_streams_open, conveyor_streams_opened_total
//   conveyor_stream_slots, conveyor_stream_slots_held_by_clients
//   conveyor_slot_memory_bytes, conveyor_slot_memory_budget_bytes
//   conveyor_delivered_{batches,images,bytes}_total{pipeline,transport}
//   conveyor_worker_threads, conveyor_uptime_seconds
//   conveyor_fetches_pending{pipeline}, conveyor_oldest_fetch_age_seconds{pipeline,host}
//   conveyor_streams_refused_total{code}               StreamBatches calls refused before their
//                                                      stream opened; every non-OK code, 0 included
//   conveyor_client_data_wait_seconds{pipeline}        histogram: how long clients waited for a
//                                                      batch (from a free credit to the batch),
//                                                      buckets 0.001 0.0025 0.005 0.01 0.025 0.05
//                                                      0.1 0.25 0.5 1 2.5 5 10 +Inf s
//                                                      (server/service/delivery_counters.h)
//   conveyor_client_starved_seconds_total{pipeline}    the histogram's sum, as a counter
//   conveyor_config_reloads_total{result="success"|"failure"},
//   conveyor_config_last_reload_success_timestamp_seconds
//   conveyor_output_cache_{hits,misses,evictions}_total{pipeline},
//   conveyor_output_cache_{bytes,capacity_bytes}{pipeline}   pipelines with cache_output only
//
// Failure series (stage failures, refusals) exist from the start at 0, so
// that rate() and increase() see the first failure. The daemon appends
// conveyor_build_info{version,revision} (server/ops/build_info.h), the TCP
// listener's own families and the process_* collector set
// (server/ops/process_metrics.h) to this text.
//
// Base units (seconds, bytes), counters end in _total, every family has its
// HELP and TYPE lines. Labels are bounded by the code and the config
// (stage, reason, pipeline, transport); no stream, sample or client ever
// becomes a label. A pipeline name goes into a label value as EscapeText
// writes it in log lines (valid UTF-8, control characters as \n, \xNN, ...),
// then escaped for the format (\\, \", \n), so any name gives a valid line.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "conveyor/v1/conveyor.pb.h"

namespace conveyor::server {

// The Content-Type of what RenderPrometheusText returns.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// `stats` should be the operator's view (every stream), as the daemon
// itself gets it from ConveyorService::GetStats().
std::string RenderPrometheusText(const v1::GetStatsResponse& stats);

// A label value for the text format: `value` made valid UTF-8 without
// control characters (EscapeText), then backslash, double quote and line
// feed escaped.
std::string PrometheusLabelValue(std::string_view value);

}  // namespace conveyor::server
