#include "server/transport/log_throttle.h"

#include <algorithm>

namespace conveyor::server {

bool LogThrottle::Admit(const std::string& key, Clock::time_point now, uint64_t* held_back) {
  auto [it, fresh] = keys_.try_emplace(key);
  State& s = it->second;
  if (!fresh && now - s.logged < interval_) {
    ++s.held_back;
    return false;
  }
  *held_back = s.held_back;
  s.held_back = 0;
  s.logged = now;
  return true;
}

std::vector<std::pair<std::string, uint64_t>> LogThrottle::TakeDue(Clock::time_point now) {
  std::vector<std::pair<std::string, uint64_t>> due;
  const bool crowded = keys_.size() > max_keys_;
  for (auto it = keys_.begin(); it != keys_.end();) {
    State& s = it->second;
    if (!crowded && now - s.logged < interval_) {
      ++it;
      continue;
    }
    if (s.held_back > 0) due.emplace_back(it->first, s.held_back);
    if (crowded || s.held_back == 0) {
      it = keys_.erase(it);  // quiet for an interval: forgotten
      continue;
    }
    s.held_back = 0;
    s.logged = now;
    ++it;
  }
  return due;
}

std::optional<LogThrottle::Clock::time_point> LogThrottle::NextDue() const {
  std::optional<Clock::time_point> next;
  for (const auto& [key, s] : keys_) {
    // A key without events held back is forgotten at the same moment.
    const Clock::time_point at = s.logged + interval_;
    next = next ? std::min(*next, at) : at;
  }
  return next;
}

}  // namespace conveyor::server
