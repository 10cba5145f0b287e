#include "core/base/epoll_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/epoll_events.h"
#include "core/base/posix_error.h"

namespace conveyor {

namespace {
constexpr int kMaxEventsPerWait = 64;
}  // namespace

EpollLoop::EpollLoop(std::string name, UniqueFd epoll_fd, UniqueFd wake_fd)
    : name_(std::move(name)), epoll_fd_(std::move(epoll_fd)), wake_fd_(std::move(wake_fd)) {}

absl::StatusOr<std::unique_ptr<EpollLoop>> EpollLoop::Create(std::string name) {
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return PosixError(absl::StrCat(name, ": eventfd"), errno);
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return PosixError(absl::StrCat(name, ": epoll_create1"), errno);
  std::unique_ptr<EpollLoop> loop(
      new EpollLoop(std::move(name), std::move(epoll), std::move(wake)));
  if (absl::Status st = loop->Control(EPOLL_CTL_ADD, loop->wake_fd_.get(), EPOLLIN,
                                      EventKey(EventTag::kWake, 0), "epoll_ctl ADD of the eventfd");
      !st.ok()) {
    return st;
  }
  return loop;
}

absl::Status EpollLoop::Control(int op, int fd, uint32_t events, uint64_t key, const char* what) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = key;
  if (::epoll_ctl(epoll_fd_.get(), op, fd, op == EPOLL_CTL_DEL ? nullptr : &ev) != 0) {
    return PosixError(absl::StrCat(name_, ": ", what), errno);
  }
  return absl::OkStatus();
}

absl::Status EpollLoop::Add(int fd, uint32_t events, uint64_t key) {
  return Control(EPOLL_CTL_ADD, fd, events, key, "epoll_ctl ADD");
}

absl::Status EpollLoop::Modify(int fd, uint32_t events, uint64_t key) {
  return Control(EPOLL_CTL_MOD, fd, events, key, "epoll_ctl MOD");
}

absl::Status EpollLoop::Remove(int fd) { return Control(EPOLL_CTL_DEL, fd, 0, 0, "epoll_ctl DEL"); }

void EpollLoop::Wake() {
  const uint64_t one = 1;
  // Fails only when the counter is full, which is still readable: a wake-up.
  (void)::write(wake_fd_.get(), &one, sizeof(one));
}

void EpollLoop::Stop() {
  stop_.store(true, std::memory_order_release);
  Wake();
}

absl::StatusOr<int> EpollLoop::RunOnce(int timeout_ms, OnEvent on_event) {
  epoll_event events[kMaxEventsPerWait];
  const int n = ::epoll_wait(epoll_fd_.get(), events, kMaxEventsPerWait, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    return PosixError(absl::StrCat(name_, ": epoll_wait"), errno);
  }
  for (int i = 0; i < n; ++i) {
    if (TagOf(events[i].data.u64) != EventTag::kWake) continue;
    uint64_t count;
    (void)::read(wake_fd_.get(), &count, sizeof(count));  // resets the counter
  }
  // Looked at after the eventfd was drained: a Stop() whose wake-up was
  // consumed above is seen here.
  if (stop_requested()) return 0;
  int handed = 0;
  for (int i = 0; i < n; ++i) {
    if (TagOf(events[i].data.u64) == EventTag::kWake) continue;
    on_event(events[i].data.u64, events[i].events);
    ++handed;
  }
  return handed;
}

absl::Status EpollLoop::Run(OnEvent on_event, OnTick on_tick) {
  int timeout_ms = -1;
  while (true) {
    absl::StatusOr<int> handed = RunOnce(timeout_ms, on_event);
    if (!handed.ok()) return handed.status();
    if (stop_requested()) return absl::OkStatus();
    const Clock::time_point now = Clock::now();
    timeout_ms = TimeoutMs(on_tick(now), now);
  }
}

int EpollLoop::TimeoutMs(std::optional<Clock::time_point> next, Clock::time_point now) {
  if (!next) return -1;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, kMaxWait.count()));
}

}  // namespace conveyor
