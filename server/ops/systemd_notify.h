// The daemon's line to systemd's service manager (sd_notify(3)): readiness,
// status, stopping and watchdog messages on $NOTIFY_SOCKET. Built on
// libsystemd when CMake found it (CONVEYOR_SYSTEMD); without it every
// message is dropped, and the first one logs a warning if $NOTIFY_SOCKET is
// set (the unit must then use Type=exec, or systemd waits for READY=1 in
// vain). Outside systemd ($NOTIFY_SOCKET unset) everything is a no-op.
//
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <chrono>
#include <string>

namespace conveyor::server {

// Sends `state` — newline-separated assignments such as "READY=1" or
// "STATUS=…" — to the service manager. True when it was sent.
bool NotifySystemd(const std::string& state);

// How often systemd expects "WATCHDOG=1" from this process: $WATCHDOG_USEC
// when it is set (and $WATCHDOG_PID, if set, is this process); zero when
// no watchdog is asked for, or without libsystemd.
std::chrono::microseconds SystemdWatchdogTimeout();

}  // namespace conveyor::server
