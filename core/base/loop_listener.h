// LoopListener: a listening socket watched by an EpollLoop, accepted
// without blocking and with AcceptBackoff (core/base/accept_backoff.h):
// when accept() fails for want of resources the socket is taken out of the
// loop's interest for the pause, and Tick() takes it back once the pause is
// over. Each accepted connection (non-blocking, close-on-exec) goes to the
// owner's callback. The unix listener and the handshake acceptor of the
// side sockets accept through it.
//
// Thread-safety: belongs to the thread of its loop; every method, and the
// callback, run there.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/base/accept_backoff.h"
#include "core/base/epoll_loop.h"
#include "core/base/unique_fd.h"

namespace conveyor {

class LoopListener {
 public:
  using Clock = EpollLoop::Clock;
  using OnConnection = std::function<void(UniqueFd conn)>;

  // Watches `listen_fd` (listening, non-blocking) in `loop` (not owned;
  // outlives the listener) for EPOLLIN under `key`. `name` is the socket in
  // logs.
  static absl::StatusOr<std::unique_ptr<LoopListener>> Create(std::string name, EpollLoop* loop,
                                                              UniqueFd listen_fd, uint64_t key,
                                                              OnConnection on_connection);
  ~LoopListener() = default;  // closing the socket takes it out of the loop
  LoopListener(const LoopListener&) = delete;
  LoopListener& operator=(const LoopListener&) = delete;

  // The socket is readable: accepts until its backlog is empty or accept()
  // must pause. Does nothing while paused.
  void AcceptAll();

  // Resumes (and accepts) once a pause is over; returns when it next needs
  // to be called (nullopt: not paused).
  std::optional<Clock::time_point> Tick(Clock::time_point now);

  bool paused() const { return paused_; }
  const AcceptBackoff& backoff() const { return backoff_; }
  int fd() const { return listen_fd_.get(); }

 private:
  LoopListener(std::string name, EpollLoop* loop, UniqueFd listen_fd, uint64_t key,
               OnConnection on_connection);
  void Pause(int error_number);

  const std::string name_;
  EpollLoop* const loop_;
  const UniqueFd listen_fd_;
  const uint64_t key_;
  const OnConnection on_connection_;
  AcceptBackoff backoff_;
  bool paused_ = false;  // out of the loop's interest until resume_at_
  Clock::time_point resume_at_;
};

}  // namespace conveyor
