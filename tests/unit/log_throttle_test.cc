// LogThrottle (server/transport/log_throttle.h): one line per key and
// interval, the rest counted and summed up. Time is passed in, never read.
#include "server/transport/log_throttle.h"

#include <catch2/catch.hpp>

namespace conveyor::server {

TEST_CASE("log throttle: the first event of a key is logged, the next ones counted",
          "[log_throttle]") {
  using std::chrono::seconds;
  const LogThrottle::Clock::time_point t0{};
  LogThrottle t(seconds(10));
  uint64_t held = 99;
  CHECK(t.Admit("uid 1", t0, &held));
  CHECK(held == 0);
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(t.Admit("uid 1", t0 + seconds(1), &held));
  // Another peer is not held back by the first one's flood.
  CHECK(t.Admit("uid 2", t0 + seconds(1), &held));
  CHECK(held == 0);
  // After the interval, the next event is logged with the count before it.
  CHECK(t.Admit("uid 1", t0 + seconds(10), &held));
  CHECK(held == 1000);
  CHECK_FALSE(t.Admit("uid 1", t0 + seconds(11), &held));
}

TEST_CASE("log throttle: counts held back come out once the interval is over", "[log_throttle]") {
  using std::chrono::seconds;
  const LogThrottle::Clock::time_point t0{};
  LogThrottle t(seconds(10));
  uint64_t held = 0;
  CHECK(t.Admit("a", t0, &held));
  CHECK_FALSE(t.Admit("a", t0 + seconds(2), &held));
  CHECK_FALSE(t.Admit("a", t0 + seconds(3), &held));
  CHECK(t.NextDue() == t0 + seconds(10));
  CHECK(t.TakeDue(t0 + seconds(9)).empty());
  auto due = t.TakeDue(t0 + seconds(10));
  REQUIRE(due.size() == 1);
  CHECK(due[0] == std::make_pair(std::string("a"), uint64_t{2}));
  // Said: nothing more until new events; a quiet key is forgotten.
  CHECK(t.TakeDue(t0 + seconds(20)).empty());
  CHECK(t.keys() == 0);
  CHECK_FALSE(t.NextDue().has_value());
  CHECK(t.Admit("a", t0 + seconds(21), &held));
  CHECK(held == 0);
}

TEST_CASE("log throttle: past max_keys the summaries come out early", "[log_throttle]") {
  using std::chrono::seconds;
  const LogThrottle::Clock::time_point t0{};
  LogThrottle t(seconds(10), /*max_keys=*/2);
  uint64_t held = 0;
  for (const char* k : {"a", "b", "c"}) {
    CHECK(t.Admit(k, t0, &held));
    CHECK_FALSE(t.Admit(k, t0, &held));
  }
  auto due = t.TakeDue(t0 + seconds(1));
  CHECK(due.size() == 3);
  CHECK(t.keys() == 0);
}

}  // namespace conveyor::server
