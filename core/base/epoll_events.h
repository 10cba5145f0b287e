// Tagged epoll events: what an event of one of the daemon's epoll loops is
// about, as a tag in the top bits of the event's u64 and a value (an fd, a
// stream id) below, so one loop can watch listeners, pending handshakes,
// its wake-up eventfd and connections without a lookup to tell them apart.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace conveyor {

enum class EventTag : uint64_t { kListen = 1, kHandshake = 2, kWake = 3, kConnection = 4 };
inline constexpr int kEventTagShift = 60;
inline uint64_t EventKey(EventTag tag, uint64_t value) {
  return (static_cast<uint64_t>(tag) << kEventTagShift) | value;
}
inline EventTag TagOf(uint64_t key) { return static_cast<EventTag>(key >> kEventTagShift); }
inline uint64_t ValueOf(uint64_t key) { return key & ((uint64_t{1} << kEventTagShift) - 1); }

}  // namespace conveyor
