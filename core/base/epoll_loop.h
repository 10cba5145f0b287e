// EpollLoop: the one epoll loop of the daemon's socket threads (the unix
// listener, the fd hand-over socket, the data socket). It owns the epoll fd
// and a wake-up eventfd; the fds it watches stay their owners', registered
// under tagged keys (core/base/epoll_events.h; EventTag::kWake is the
// loop's own). Run() waits, hands every ready event to the caller, then asks
// the caller's tick when it next needs to be called (a deadline, or none),
// until Stop().
//
// Wake() from any thread makes the loop's wait return and its tick run
// (new work for the loop's thread). Stop() from any thread makes Run()
// return at its next wake-up; it is sticky, and the events that arrived
// with it are not handed out. The stop flag is read after the eventfd was
// drained, never before, so a Stop() racing another Wake() is never lost.
//
// Thread-safety: Wake(), Stop() and stop_requested() may be called from any
// thread; Add/Modify/Remove, Run and RunOnce from the loop's thread (or
// before it exists). The callbacks run on the thread calling Run/RunOnce.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"

namespace conveyor {

class EpollLoop {
 public:
  using Clock = std::chrono::steady_clock;
  // An event of a watched fd: its key and epoll's event bits.
  using OnEvent = absl::FunctionRef<void(uint64_t key, uint32_t events)>;
  // After the events of one wait: when to be called next (nullopt: when an
  // event or a Wake() comes).
  using OnTick = absl::FunctionRef<std::optional<Clock::time_point>(Clock::time_point now)>;

  // The longest wait without a deadline is unbounded; with one, it is at
  // most this long (a clock that jumps is caught up with soon).
  static constexpr std::chrono::milliseconds kMaxWait{60'000};

  // `name` is the loop's owner in error messages ("data socket").
  static absl::StatusOr<std::unique_ptr<EpollLoop>> Create(std::string name);
  EpollLoop(const EpollLoop&) = delete;
  EpollLoop& operator=(const EpollLoop&) = delete;

  // Watches `fd` (not owned; the owner closes it after Remove or instead)
  // for `events` (EPOLLIN, ...), reported under `key`, whose tag must not
  // be EventTag::kWake. Errors name the loop and the operation.
  absl::Status Add(int fd, uint32_t events, uint64_t key);
  absl::Status Modify(int fd, uint32_t events, uint64_t key);
  absl::Status Remove(int fd);

  // Any thread: the wait under way (or the next) returns.
  void Wake();
  // Any thread: Run() returns at its next wake-up. Idempotent.
  void Stop();
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }

  // Waits up to `timeout_ms` (-1: no limit; 0: only looks) and hands out
  // the events that are ready; returns how many were handed out (0 after a
  // wake-up or a Stop(), whose events are not handed out).
  absl::StatusOr<int> RunOnce(int timeout_ms, OnEvent on_event);

  // Runs until Stop(): RunOnce, then `on_tick`, whose deadline bounds the
  // next wait. An error of epoll_wait ends it (returned; the loop is of no
  // further use).
  absl::Status Run(OnEvent on_event, OnTick on_tick);

  // The wait until `next` (rounded up, within [0, kMaxWait]); -1 without one.
  static int TimeoutMs(std::optional<Clock::time_point> next, Clock::time_point now);

 private:
  EpollLoop(std::string name, UniqueFd epoll_fd, UniqueFd wake_fd);
  absl::Status Control(int op, int fd, uint32_t events, uint64_t key, const char* what);

  const std::string name_;
  const UniqueFd epoll_fd_;
  const UniqueFd wake_fd_;  // eventfd: readable after Wake() or Stop()
  std::atomic<bool> stop_{false};
};

}  // namespace conveyor
