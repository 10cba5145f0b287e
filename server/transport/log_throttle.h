// LogThrottle: rate-limits a log line per key (a peer) — the first event of
// a key is logged at once, later ones within `interval` are only counted,
// and the count comes out as one summary line per key and interval: either
// with the next event after the interval, or from TakeDue() when no further
// event comes. The fd hand-over socket uses it for refused hand-overs, which
// one client could otherwise make it write tens of thousands of times a
// second. At most `max_keys` keys are remembered; past that the oldest
// summaries are handed out early (TakeDue) and forgotten.
//
// Thread-safety: not thread-safe; it belongs to its owner's thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace conveyor::server {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogThrottle(Clock::duration interval, size_t max_keys = 1024)
      : interval_(interval), max_keys_(max_keys) {}

  // An event of `key` at `now`. True: log it now, saying that `*held_back`
  // (may be 0) events of this key were counted and not logged before it.
  // False: counted, not to be logged.
  bool Admit(const std::string& key, Clock::time_point now, uint64_t* held_back);

  // The keys with events held back for at least `interval` since their last
  // logged line (or all, while more than max_keys are remembered), with the
  // count, which starts again at zero; keys without events held back for an
  // interval are forgotten.
  std::vector<std::pair<std::string, uint64_t>> TakeDue(Clock::time_point now);

  // When TakeDue next has something to say (nullopt: nothing held back).
  std::optional<Clock::time_point> NextDue() const;

  size_t keys() const { return keys_.size(); }

 private:
  struct State {
    Clock::time_point logged;  // the last line of this key
    uint64_t held_back = 0;
  };
  const Clock::duration interval_;
  const size_t max_keys_;
  std::map<std::string, State> keys_;
};

}  // namespace conveyor::server
