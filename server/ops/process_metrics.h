// The standard Prometheus process collector's figures for conveyord, read
// from /proc/self on each scrape: CPU time, resident and virtual memory,
// open and allowed fds, start time, threads. Rendered in the text
// exposition format (0.0.4) under the names every Prometheus client uses,
// so the usual dashboards and alerts work unchanged:
//
//   process_cpu_seconds_total        counter  user + system CPU time
//   process_resident_memory_bytes    gauge
//   process_virtual_memory_bytes     gauge
//   process_open_fds                 gauge
//   process_max_fds                  gauge    the soft RLIMIT_NOFILE
//   process_start_time_seconds       gauge    since the Unix epoch
//   process_threads                  gauge
//
// A figure that cannot be read (no /proc) is left out, never made up.
//
// Thread-safety: pure functions (reading /proc/self is safe from any thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::server {

struct ProcessFigures {
  std::optional<double> cpu_seconds;
  std::optional<uint64_t> resident_bytes;
  std::optional<uint64_t> virtual_bytes;
  std::optional<uint64_t> open_fds;
  std::optional<uint64_t> max_fds;
  std::optional<double> start_time_seconds;
  std::optional<uint64_t> threads;
};

// Fills cpu_seconds, resident_bytes, virtual_bytes, threads and
// start_time_seconds from `stat` (the text of /proc/<pid>/stat), given the
// clock ticks per second, the page size and the boot time (btime of
// /proc/stat, seconds since the epoch). False (nothing filled) when `stat`
// does not parse.
bool ParseProcStat(std::string_view stat, long ticks_per_second, long page_size,
                   uint64_t boot_time_seconds, ProcessFigures* out);

// The figures of this process now.
ProcessFigures ReadProcessFigures();

// `figures` in the text format, HELP and TYPE lines included.
std::string RenderProcessMetrics(const ProcessFigures& figures);

}  // namespace conveyor::server
