#include "remote/curl_epoll_driver.h"

#include <errno.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/engine/stats.h"
#include "remote/curl_handles.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

// Ready sockets taken per epoll_wait; more stay ready for the next one.
constexpr int kMaxEvents = 256;

// What curl_multi_assign stores for a socket epoll watches (any non-null).
char kWatched;

// epoll_data.u64 of a socket: its number, with this bit set for the
// SocketHandler's sockets (libcurl's and the eventfd have it clear).
constexpr uint64_t kHandlerSocket = uint64_t{1} << 32;

}  // namespace

absl::StatusOr<std::unique_ptr<CurlEpollDriver>> CurlEpollDriver::Create(CURLM* multi) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return PosixError("epoll_create1", errno);
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake) return PosixError("eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<uint32_t>(wake.get());
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return PosixError("epoll_ctl(ADD eventfd)", errno);
  }
  std::unique_ptr<CurlEpollDriver> driver(
      new CurlEpollDriver(multi, std::move(epoll), std::move(wake)));
  RETURN_IF_ERROR(CurlMultiError(
      "curl_multi_setopt(CURLMOPT_SOCKETFUNCTION)",
      curl_multi_setopt(multi, CURLMOPT_SOCKETFUNCTION, &CurlEpollDriver::OnSocket)));
  RETURN_IF_ERROR(CurlMultiError("curl_multi_setopt(CURLMOPT_SOCKETDATA)",
                                 curl_multi_setopt(multi, CURLMOPT_SOCKETDATA, driver.get())));
  RETURN_IF_ERROR(
      CurlMultiError("curl_multi_setopt(CURLMOPT_TIMERFUNCTION)",
                     curl_multi_setopt(multi, CURLMOPT_TIMERFUNCTION, &CurlEpollDriver::OnTimer)));
  RETURN_IF_ERROR(CurlMultiError("curl_multi_setopt(CURLMOPT_TIMERDATA)",
                                 curl_multi_setopt(multi, CURLMOPT_TIMERDATA, driver.get())));
  return driver;
}

CurlEpollDriver::CurlEpollDriver(CURLM* multi, UniqueFd epoll, UniqueFd wake)
    : multi_(multi), epoll_(std::move(epoll)), wake_(std::move(wake)) {}

CurlEpollDriver::~CurlEpollDriver() {
  // (Clearing callbacks cannot fail on a valid handle; nothing to do if it did.)
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, nullptr);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, nullptr);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, nullptr);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, nullptr);
}

void CurlEpollDriver::Wake() const {
  const uint64_t one = 1;
  // EAGAIN (the counter is full) still leaves it readable: the wake is there.
  [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
}

int CurlEpollDriver::OnSocket(CURL* /*easy*/, curl_socket_t s, int what, void* self_ptr,
                              void* socket_data) {
  auto* self = static_cast<CurlEpollDriver*>(self_ptr);
  if (what == CURL_POLL_REMOVE) {
    // The socket may be closed already (then epoll dropped it itself).
    ::epoll_ctl(self->epoll_.get(), EPOLL_CTL_DEL, s, nullptr);
    (void)curl_multi_assign(self->multi_, s, nullptr);  // (the socket is going either way)
    return 0;
  }
  epoll_event ev{};
  ev.events =
      ((what & CURL_POLL_IN) != 0 ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) != 0 ? EPOLLOUT : 0u);
  ev.data.u64 = static_cast<uint32_t>(s);
  const int first = socket_data == nullptr ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (::epoll_ctl(self->epoll_.get(), first, s, &ev) != 0) {
    // A socket number libcurl reused after a close we were not told of
    // (ADD: EEXIST), or one epoll dropped when it was closed (MOD: ENOENT).
    const int other = first == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (::epoll_ctl(self->epoll_.get(), other, s, &ev) != 0) return -1;
  }
  // -1 (an error: libcurl fails the transfer) if libcurl does not know the socket.
  return curl_multi_assign(self->multi_, s, &kWatched) == CURLM_OK ? 0 : -1;
}

int CurlEpollDriver::OnTimer(CURLM* /*multi*/, long timeout_ms, void* self_ptr) {
  auto* self = static_cast<CurlEpollDriver*>(self_ptr);
  if (timeout_ms < 0) {
    self->timer_set_ = false;
  } else {
    self->timer_set_ = true;
    self->timer_due_ns_ = MonotonicNanos() + static_cast<uint64_t>(timeout_ms) * 1'000'000;
  }
  return 0;
}

bool CurlEpollDriver::Watch(int fd, uint32_t epoll_events, bool added) {
  epoll_event ev{};
  ev.events = epoll_events;
  ev.data.u64 = kHandlerSocket | static_cast<uint32_t>(fd);
  return ::epoll_ctl(epoll_.get(), added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0;
}

void CurlEpollDriver::Pause(uint64_t until_ns) const {
  const uint64_t now = MonotonicNanos();
  if (until_ns <= now) return;
  const uint64_t wait = until_ns - now;
  const timespec ts{static_cast<time_t>(wait / 1'000'000'000),
                    static_cast<long>(wait % 1'000'000'000)};
  pollfd p{wake_.get(), POLLIN, 0};
  ::ppoll(&p, 1, &ts, nullptr);
}

void CurlEpollDriver::Report(CURLMcode code) {
  // A stale event for a socket libcurl closed within this Drive: expected.
  if (code == CURLM_OK || code == CURLM_BAD_SOCKET) return;
  if (!reported_) {
    spdlog::error("remote: {} (said once)",
                  std::string(CurlMultiError("curl_multi_socket_action", code).message()));
  }
  reported_ = true;
}

void CurlEpollDriver::Drive(uint64_t deadline_ns) {
  const uint64_t now = MonotonicNanos();
  const uint64_t due = timer_set_ ? std::min(deadline_ns, timer_due_ns_) : deadline_ns;
  const int timeout_ms =
      due <= now ? 0
                 : static_cast<int>(std::min<uint64_t>((due - now + 999'999) / 1'000'000, INT_MAX));
  epoll_event events[kMaxEvents];
  const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
  int running = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t tag = events[i].data.u64;
    const int fd = static_cast<int>(static_cast<uint32_t>(tag));
    if ((tag & kHandlerSocket) != 0) {
      if (handler_ != nullptr) handler_->OnSocketReady(fd, events[i].events);
      continue;
    }
    if (fd == wake_.get()) {
      uint64_t count;
      [[maybe_unused]] const ssize_t r = ::read(fd, &count, sizeof count);
      continue;
    }
    const uint32_t e = events[i].events;
    const int mask = ((e & EPOLLIN) != 0 ? CURL_CSELECT_IN : 0) |
                     ((e & EPOLLOUT) != 0 ? CURL_CSELECT_OUT : 0) |
                     ((e & (EPOLLERR | EPOLLHUP)) != 0 ? CURL_CSELECT_ERR : 0);
    Report(curl_multi_socket_action(multi_, fd, mask, &running));
  }
  if (timer_set_ && timer_due_ns_ <= MonotonicNanos()) {
    timer_set_ = false;  // libcurl sets it again from inside if it wants
    Report(curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running));
  }
}

}  // namespace conveyor::remote
