#include "server/ops/systemd_notify.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "spdlog/spdlog.h"

#ifdef CONVEYOR_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace conveyor::server {

#ifdef CONVEYOR_HAVE_SYSTEMD

bool NotifySystemd(const std::string& state) {
  // 0 = $NOTIFY_SOCKET unset; < 0 = an error (-errno).
  const int r = sd_notify(/*unset_environment=*/0, state.c_str());
  if (r < 0) {
    static std::once_flag logged;
    std::call_once(logged, [r] {
      spdlog::warn("cannot notify the service manager on $NOTIFY_SOCKET: {}", strerror(-r));
    });
  }
  return r > 0;
}

std::chrono::microseconds SystemdWatchdogTimeout() {
  uint64_t usec = 0;
  // > 0 only when $WATCHDOG_USEC is set and $WATCHDOG_PID, if set, is us.
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0) return {};
  return std::chrono::microseconds(usec);
}

#else  // built without libsystemd

bool NotifySystemd(const std::string& state) {
  static std::once_flag logged;
  if (std::getenv("NOTIFY_SOCKET") != nullptr) {
    std::call_once(logged, [] {
      spdlog::warn(
          "$NOTIFY_SOCKET is set but conveyord was built without libsystemd "
          "(CONVEYOR_SYSTEMD): no readiness, status or watchdog messages; run it with "
          "Type=exec");
    });
  }
  return false;
}

std::chrono::microseconds SystemdWatchdogTimeout() { return {}; }

#endif

}  // namespace conveyor::server
