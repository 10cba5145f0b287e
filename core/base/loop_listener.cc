#include "core/base/loop_listener.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include "spdlog/spdlog.h"

namespace conveyor {

LoopListener::LoopListener(std::string name, EpollLoop* loop, UniqueFd listen_fd, uint64_t key,
                           OnConnection on_connection)
    : name_(name),
      loop_(loop),
      listen_fd_(std::move(listen_fd)),
      key_(key),
      on_connection_(std::move(on_connection)),
      backoff_(std::move(name)) {}

absl::StatusOr<std::unique_ptr<LoopListener>> LoopListener::Create(std::string name,
                                                                   EpollLoop* loop,
                                                                   UniqueFd listen_fd, uint64_t key,
                                                                   OnConnection on_connection) {
  std::unique_ptr<LoopListener> l(
      new LoopListener(std::move(name), loop, std::move(listen_fd), key, std::move(on_connection)));
  if (absl::Status st = loop->Add(l->listen_fd_.get(), EPOLLIN, key); !st.ok()) return st;
  return l;
}

void LoopListener::AcceptAll() {
  while (!paused_) {
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) {
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // Out of fds (or anything else that would fail again at once): the
      // socket stays readable, so pause rather than spin.
      Pause(e);
      return;
    }
    backoff_.Accepted();
    on_connection_(std::move(conn));
  }
}

void LoopListener::Pause(int error_number) {
  const Clock::duration pause = backoff_.Failed(error_number);
  if (absl::Status st = loop_->Modify(listen_fd_.get(), 0, key_); !st.ok()) {
    // Still watched: the loop wakes for it, but AcceptAll does nothing
    // until Tick resumes, and the deadline below still bounds the pause.
    spdlog::error("{}", std::string(st.message()));
  }
  paused_ = true;
  resume_at_ = Clock::now() + pause;
}

std::optional<LoopListener::Clock::time_point> LoopListener::Tick(Clock::time_point now) {
  if (!paused_) return std::nullopt;
  if (now < resume_at_) return resume_at_;
  if (absl::Status st = loop_->Modify(listen_fd_.get(), EPOLLIN, key_); !st.ok()) {
    spdlog::error("{}", std::string(st.message()));
    resume_at_ = now + backoff_.pause();  // try again after another pause
    return resume_at_;
  }
  paused_ = false;
  AcceptAll();  // may pause again
  if (paused_) return resume_at_;
  return std::nullopt;
}

}  // namespace conveyor
