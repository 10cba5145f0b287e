#include "server/service/reload_counters.h"

namespace conveyor::server {

namespace {

uint64_t UnixNs(ReloadCounters::WallClock::time_point t) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  return ns > 0 ? static_cast<uint64_t>(ns) : 0;
}

}  // namespace

ReloadCounters::ReloadCounters(WallClock::time_point loaded_at)
    : last_success_ns_(UnixNs(loaded_at)) {}

void ReloadCounters::Succeeded(WallClock::time_point at) {
  last_success_ns_.store(UnixNs(at), std::memory_order_relaxed);
  succeeded_.fetch_add(1, std::memory_order_relaxed);
}

void ReloadCounters::Failed() { failed_.fetch_add(1, std::memory_order_relaxed); }

void ReloadCounters::AppendTo(v1::GetStatsResponse* out) const {
  out->set_config_reloads_succeeded(succeeded());
  out->set_config_reloads_failed(failed());
  out->set_config_last_reload_success_unix_ns(last_success_unix_ns());
}

}  // namespace conveyor::server
