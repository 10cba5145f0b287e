// The adaptive per-host connection limit (remote/host_concurrency.h),
// driven with simulated outcomes and times: where it starts, when it grows,
// when it halves, its bounds, and that it settles under a host whose
// backlog overflows past a number of connections; with the per-host
// figures it feeds (remote/host_stats.h).
#ifdef CONVEYOR_HAVE_SERVER
#include <cstdint>
#include <vector>

#include "catch2/catch.hpp"
#include "remote/host_concurrency.h"
#include "remote/host_stats.h"

namespace conveyor::remote {
namespace {

constexpr uint64_t kMs = 1'000'000;

// `n` answers of `latency` each, all started at `t`, the host at its limit.
void Answers(HostConcurrency* c, uint32_t n, uint64_t t, uint64_t latency, bool limited = true) {
  for (uint32_t i = 0; i < n; ++i) {
    if (limited) c->OnLimited();
    c->OnAnswer(t, latency, 0);
  }
}

TEST_CASE("the limit starts at 4, below the cap, and is the cap when fixed", "[remote]") {
  CHECK(HostConcurrency(64, true).limit() == 4);
  CHECK(HostConcurrency(2, true).limit() == 2);
  CHECK(HostConcurrency(64, false).limit() == 64);
  HostConcurrency fixed(64, false);
  CHECK_FALSE(fixed.OnCongestion(0, 1));
  fixed.OnAnswer(0, 5 * kMs, 2'000 * kMs);
  CHECK(fixed.limit() == 64);
  CHECK(fixed.decreases() == 0);
}

TEST_CASE("a round of answers at the limit adds one, up to the cap", "[remote]") {
  HostConcurrency c(6, true);
  Answers(&c, 3, 0, 10 * kMs);
  CHECK(c.limit() == 4);  // a round is as many answers as the limit
  Answers(&c, 1, 0, 10 * kMs);
  CHECK(c.limit() == 5);
  Answers(&c, 5, 0, 10 * kMs);
  CHECK(c.limit() == 6);
  Answers(&c, 60, 0, 10 * kMs);
  CHECK(c.limit() == 6);  // never above max_connections_per_host
}

TEST_CASE("the limit does not grow while requests never wait for a place", "[remote]") {
  HostConcurrency c(64, true);
  Answers(&c, 40, 0, 10 * kMs, /*limited=*/false);
  CHECK(c.limit() == 4);
}

TEST_CASE("the limit holds while latency is past twice the best round's", "[remote]") {
  HostConcurrency c(64, true);
  Answers(&c, 4, 0, 10 * kMs);  // best round: 10 ms
  REQUIRE(c.limit() == 5);
  Answers(&c, 50, 0, 25 * kMs);  // 2.5x: saturated, hold
  CHECK(c.limit() == 5);
  Answers(&c, 5, 0, 19 * kMs);  // within 2x: grow again
  CHECK(c.limit() == 6);
}

TEST_CASE("congestion halves the limit once per round, never below 1", "[remote]") {
  HostConcurrency c(64, true);
  for (int round = 0; round < 40; ++round) Answers(&c, c.limit(), 0, 10 * kMs);
  REQUIRE(c.limit() == 44);
  // Every transfer of the round (all started at 100 ms) fails: one halving.
  CHECK(c.OnCongestion(100 * kMs, 200 * kMs));
  CHECK(c.limit() == 22);
  for (int i = 0; i < 20; ++i) CHECK_FALSE(c.OnCongestion(100 * kMs, 210 * kMs + i));
  CHECK(c.limit() == 22);
  // One started after the drop halves it again.
  CHECK(c.OnCongestion(250 * kMs, 300 * kMs));
  CHECK(c.limit() == 11);
  for (uint64_t t = 400; t < 1000; t += 100) c.OnCongestion(t * kMs, (t + 50) * kMs);
  CHECK(c.limit() == 1);
  CHECK_FALSE(c.OnCongestion(2000 * kMs, 2001 * kMs));  // at 1 already
  CHECK(c.limit() == 1);
  CHECK(c.decreases() == 5);  // 44 -> 22 -> 11 -> 5 -> 2 -> 1
}

TEST_CASE("a connect of 0.9 s or more (a SYN sent again) halves the limit", "[remote]") {
  HostConcurrency c(64, true);
  c.OnAnswer(0, 10 * kMs, 899 * kMs);
  CHECK(c.limit() == 4);
  CHECK(c.OnAnswer(kMs, 1'010 * kMs, 1'000 * kMs));
  CHECK(c.limit() == 2);
  CHECK(c.decreases() == 1);
}

// A host that takes `capacity` connections at once: in each round the
// reader starts `limit` transfers; past capacity the extra ones fail (a
// dropped SYN, then a slow connect), the rest answer in 10 ms.
TEST_CASE("under a host that takes 8 connections the limit settles near 8", "[remote]") {
  constexpr uint32_t kCapacity = 8;
  HostConcurrency c(64, true);
  uint64_t t = 0;
  std::vector<uint32_t> limits;
  for (int round = 0; round < 400; ++round) {
    const uint32_t n = c.limit();
    const uint64_t start = t;
    // The round lasts until its slowest answer: 10 ms, or 1010 ms when a
    // SYN had to be sent again.
    t += n > kCapacity ? 1'010 * kMs : 10 * kMs;
    for (uint32_t i = 0; i < n; ++i) {
      c.OnLimited();
      if (i < kCapacity) {
        c.OnAnswer(start, 10 * kMs, 0);
      } else {
        c.OnAnswer(start, 1'010 * kMs, 1'000 * kMs);
      }
    }
    limits.push_back(n);
  }
  uint64_t sum = 0, over = 0;
  for (size_t i = 100; i < limits.size(); ++i) {
    sum += limits[i];
    if (limits[i] > kCapacity + 1) ++over;
    CHECK(limits[i] <= kCapacity + 1);  // one past capacity, then halved
    CHECK(limits[i] >= kCapacity / 2);
  }
  CHECK(over == 0);
  CHECK(sum / (limits.size() - 100) >= kCapacity / 2 + 1);  // not stuck low
}

TEST_CASE("host figures: latency buckets, attempts by status, merged by host", "[remote]") {
  HostStats a;
  a.host = "h:1";
  a.RecordAttempt(200, 3 * kMs, 100);   // (2.5 ms, 5 ms]
  a.RecordAttempt(200, 1 * kMs, 50);    // exactly 1 ms: the first bucket
  a.RecordAttempt(0, 60'000 * kMs, 0);  // past 30 s: the unbounded bucket
  a.RecordAttempt(503, 20 * kMs, 0);
  CHECK(a.attempts_by_status[200] == 2);
  CHECK(a.attempts_by_status[0] == 1);
  CHECK(a.attempts_by_status[503] == 1);
  CHECK(a.bytes == 150);
  CHECK(a.latency_buckets[0] == 1);
  CHECK(a.latency_buckets[2] == 1);
  CHECK(a.latency_buckets[4] == 1);  // (10 ms, 25 ms]
  CHECK(a.latency_buckets.back() == 1);
  HostStats b = a;
  b.connection_limit = 3;
  a.connection_limit = 4;
  HostStats other;
  other.host = "g:2";
  const std::vector<HostStats> merged = MergeHostStats({{a, other}, {b}});
  REQUIRE(merged.size() == 2);
  CHECK(merged[0].host == "g:2");
  CHECK(merged[1].host == "h:1");
  CHECK(merged[1].attempts_by_status.at(200) == 4);
  CHECK(merged[1].connection_limit == 7);  // the I/O threads' shares summed
  CHECK(merged[1].latency_sum_ns == 2 * a.latency_sum_ns);
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER
