// Tests of the daemon's one epoll loop (core/base/epoll_loop.h): events
// reach the caller under their keys, Wake() and a tick's deadline end a
// wait, Stop() from another thread ends a loop that waits without a
// deadline, and the events that come with a Stop() are not handed out.
#include "core/base/epoll_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include "core/base/epoll_events.h"
#include "core/base/unique_fd.h"

namespace conveyor {
namespace {

using Clock = EpollLoop::Clock;
using namespace std::chrono_literals;

std::unique_ptr<EpollLoop> MakeLoop() {
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("test loop");
  REQUIRE(loop.ok());
  return *std::move(loop);
}

UniqueFd ReadableEventFd() {
  UniqueFd fd(::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));
  REQUIRE(fd.valid());
  return fd;
}

TEST_CASE("epoll loop: a watched fd's event comes with its key and bits", "[epoll_loop]") {
  auto loop = MakeLoop();
  UniqueFd fd = ReadableEventFd();
  const uint64_t key = EventKey(EventTag::kConnection, 42);
  REQUIRE(loop->Add(fd.get(), EPOLLIN, key).ok());
  std::vector<std::pair<uint64_t, uint32_t>> seen;
  absl::StatusOr<int> n =
      loop->RunOnce(1000, [&](uint64_t k, uint32_t e) { seen.emplace_back(k, e); });
  REQUIRE(n.ok());
  CHECK(*n == 1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].first == key);
  CHECK((seen[0].second & EPOLLIN) != 0);
  // Not watched for reading any more: nothing is ready.
  REQUIRE(loop->Modify(fd.get(), 0, key).ok());
  n = loop->RunOnce(0, [&](uint64_t k, uint32_t e) { seen.emplace_back(k, e); });
  REQUIRE(n.ok());
  CHECK(*n == 0);
  REQUIRE(loop->Remove(fd.get()).ok());
  // Errors name the loop.
  absl::Status twice = loop->Remove(fd.get());
  CHECK(!twice.ok());
  CHECK(twice.message().find("test loop") != absl::string_view::npos);
}

TEST_CASE("epoll loop: Stop from another thread ends a loop waiting without a deadline",
          "[epoll_loop]") {
  auto loop = MakeLoop();
  std::atomic<int> ticks{0};
  std::promise<absl::Status> done;
  std::thread runner([&] {
    done.set_value(loop->Run([](uint64_t, uint32_t) {},
                             [&](Clock::time_point) -> std::optional<Clock::time_point> {
                               ++ticks;
                               return std::nullopt;
                             }));
  });
  std::future<absl::Status> result = done.get_future();
  // Without a deadline nor an event the loop would wait for ever.
  CHECK(result.wait_for(50ms) == std::future_status::timeout);
  loop->Stop();
  // A loop that missed the Stop hangs the join: the test's timeout tells.
  const bool ended = result.wait_for(10s) == std::future_status::ready;
  runner.join();
  REQUIRE(ended);
  CHECK(result.get().ok());
  CHECK(loop->stop_requested());
}

TEST_CASE("epoll loop: Wake runs the tick, whose deadline bounds the next wait", "[epoll_loop]") {
  auto loop = MakeLoop();
  std::atomic<int> ticks{0};
  std::vector<Clock::duration> gaps;  // between ticks after the deadline was asked for
  Clock::time_point asked_at;
  absl::Status st = absl::UnknownError("not run");
  std::thread runner([&] {
    st = loop->Run([](uint64_t, uint32_t) {},
                   [&](Clock::time_point now) -> std::optional<Clock::time_point> {
                     const int t = ++ticks;
                     if (t == 1) {  // woken by Wake(): ask to be called again in 20 ms
                       asked_at = now;
                       return now + 20ms;
                     }
                     gaps.push_back(now - asked_at);
                     loop->Stop();  // from the loop's own thread
                     return std::nullopt;
                   });
  });
  loop->Wake();
  runner.join();
  CHECK(st.ok());
  CHECK(ticks == 2);
  REQUIRE(gaps.size() == 1);
  CHECK(gaps[0] >= 20ms);
}

TEST_CASE("epoll loop: the events that come with a Stop are not handed out", "[epoll_loop]") {
  auto loop = MakeLoop();
  UniqueFd fd = ReadableEventFd();
  REQUIRE(loop->Add(fd.get(), EPOLLIN, EventKey(EventTag::kConnection, 1)).ok());
  loop->Stop();
  int handed = 0;
  absl::StatusOr<int> n = loop->RunOnce(1000, [&](uint64_t, uint32_t) { ++handed; });
  REQUIRE(n.ok());
  CHECK(*n == 0);
  CHECK(handed == 0);
  // Stop is sticky: Run returns at once.
  CHECK(loop->Run([&](uint64_t, uint32_t) { ++handed; },
                  [](Clock::time_point) -> std::optional<Clock::time_point> { return {}; })
            .ok());
  CHECK(handed == 0);
}

TEST_CASE("epoll loop: waits are rounded up and bounded", "[epoll_loop]") {
  const Clock::time_point now = Clock::now();
  CHECK(EpollLoop::TimeoutMs(std::nullopt, now) == -1);
  CHECK(EpollLoop::TimeoutMs(now - 5s, now) == 0);
  CHECK(EpollLoop::TimeoutMs(now, now) == 0);
  CHECK(EpollLoop::TimeoutMs(now + 1500us, now) == 2);  // never wakes before the deadline
  CHECK(EpollLoop::TimeoutMs(now + 20ms, now) == 20);
  CHECK(EpollLoop::TimeoutMs(now + 1h, now) == EpollLoop::kMaxWait.count());
}

}  // namespace
}  // namespace conveyor
