// AcceptBackoff: what a listener does when accept() fails for want of
// resources (the process or the system is out of fds, buffers or memory).
// The listening socket then stays readable, so retrying at once would spin
// a core: the listener pauses instead, 10 ms after the first failure of an
// episode, doubling after each further one up to 500 ms. An episode is
// logged twice — a warning when it begins (naming the error), a line when a
// connection is accepted again (with the count of failed attempts) — never
// once per attempt. This class is the policy and its log lines; the
// listener that applies it is core/base/loop_listener.h.
//
// Thread-safety: not thread-safe; it belongs to its listener's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace conveyor {

class AcceptBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kFirstPause = std::chrono::milliseconds(10);
  static constexpr Clock::duration kMaxPause = std::chrono::milliseconds(500);

  // `name` is the socket in logs ("data socket", "unix socket").
  explicit AcceptBackoff(std::string name) : name_(std::move(name)) {}

  // accept() failed with `error_number` (other than EAGAIN, EINTR,
  // ECONNABORTED): returns how long to leave the listener before trying
  // again.
  Clock::duration Failed(int error_number);
  // accept() gave a connection: ends the episode under way, if any.
  void Accepted();

  bool in_episode() const { return failures_ != 0; }
  uint64_t failures() const { return failures_; }   // in this episode
  Clock::duration pause() const { return pause_; }  // the last one; zero outside an episode

 private:
  const std::string name_;
  uint64_t failures_ = 0;
  Clock::duration pause_{};
};

}  // namespace conveyor
