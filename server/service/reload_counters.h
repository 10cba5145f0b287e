// ReloadCounters: how the daemon's config reloads (SIGHUP) went since it
// started — how many were applied, how many refused, and when the config
// last loaded successfully (the start counts: a daemon that never reloaded
// reports its start time, as Prometheus' own
// prometheus_config_last_reload_success_timestamp_seconds does). The
// reloader (server/reloader.h) records each outcome; GetStats copies them
// out (GetStatsResponse.config_reloads_*), and the metrics endpoint shows
// them (conveyor_config_reloads_total{result}, conveyor_config_last_reload_
// success_timestamp_seconds).
//
// Thread-safety: every method may run concurrently from any threads (relaxed
// atomics: each figure is read on its own).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "conveyor/v1/conveyor.pb.h"

namespace conveyor::server {

class ReloadCounters {
 public:
  using WallClock = std::chrono::system_clock;

  // The config loaded successfully at `loaded_at` (the daemon's start).
  explicit ReloadCounters(WallClock::time_point loaded_at = WallClock::now());
  ReloadCounters(const ReloadCounters&) = delete;
  ReloadCounters& operator=(const ReloadCounters&) = delete;

  // A reload applied at `at` / a reload refused.
  void Succeeded(WallClock::time_point at = WallClock::now());
  void Failed();

  uint64_t succeeded() const { return succeeded_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  // Nanoseconds since the Unix epoch of the last successful load.
  uint64_t last_success_unix_ns() const { return last_success_ns_.load(std::memory_order_relaxed); }

  // Sets the config_reloads_* fields of `out`.
  void AppendTo(v1::GetStatsResponse* out) const;

 private:
  std::atomic<uint64_t> succeeded_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> last_success_ns_{0};
};

}  // namespace conveyor::server
