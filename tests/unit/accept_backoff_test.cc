// Tests of the accept backoff (core/base/accept_backoff.h) and of the
// listener that applies it on an epoll loop (core/base/loop_listener.h):
// the pause starts at 10 ms and doubles up to 500 ms, resets once a
// connection is accepted again, and while paused the socket is out of the
// loop's interest and accept() is not tried. accept() is made to fail on a
// socket that is bound but not yet listening (EINVAL, at once and every
// time, as EMFILE would), then succeeds once it listens.
#include "core/base/accept_backoff.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/epoll_events.h"
#include "core/base/epoll_loop.h"
#include "core/base/loop_listener.h"
#include "core/base/unique_fd.h"

namespace conveyor {
namespace {

using namespace std::chrono_literals;
using Clock = AcceptBackoff::Clock;

TEST_CASE("accept backoff: the pause doubles from 10 ms up to 500 ms", "[accept_backoff]") {
  AcceptBackoff b("test socket");
  CHECK(!b.in_episode());
  std::vector<Clock::duration> pauses;
  for (int i = 0; i < 9; ++i) pauses.push_back(b.Failed(EMFILE));
  const std::vector<Clock::duration> expected = {10ms,  20ms,  40ms,  80ms, 160ms,
                                                 320ms, 500ms, 500ms, 500ms};
  CHECK(pauses == expected);
  CHECK(b.in_episode());
  CHECK(b.failures() == 9);
  CHECK(b.pause() == 500ms);
}

TEST_CASE("accept backoff: an accepted connection ends the episode and resets the pause",
          "[accept_backoff]") {
  AcceptBackoff b("test socket");
  b.Failed(EMFILE);
  b.Failed(EMFILE);
  CHECK(b.pause() == 20ms);
  b.Accepted();
  CHECK(!b.in_episode());
  CHECK(b.failures() == 0);
  CHECK(b.pause() == Clock::duration::zero());
  CHECK(b.Failed(ENFILE) == 10ms);  // a new episode starts from the first pause
  b.Accepted();
  b.Accepted();  // outside an episode: nothing to end
  CHECK(!b.in_episode());
}

// A unix socket bound to a fresh abstract address, not listening yet.
struct BoundSocket {
  BoundSocket() {
    fd.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    REQUIRE(fd.valid());
    addr.sun_family = AF_UNIX;
    static int counter = 0;
    const std::string name = "conveyor-accept-backoff-test-" + std::to_string(::getpid()) + "-" +
                             std::to_string(++counter);
    std::memcpy(addr.sun_path + 1, name.data(), name.size());
    len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0);
  }
  UniqueFd Connect() const {
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(c.valid());
    REQUIRE(::connect(c.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0);
    return c;
  }
  UniqueFd fd;
  sockaddr_un addr{};
  socklen_t len = 0;
};

TEST_CASE("loop listener: failing accepts pause the socket with a growing pause, then it serves",
          "[accept_backoff]") {
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("test loop");
  REQUIRE(loop.ok());
  BoundSocket sock;
  const int raw = sock.fd.get();
  int accepted = 0;
  absl::StatusOr<std::unique_ptr<LoopListener>> made =
      LoopListener::Create("test socket", loop->get(), std::move(sock.fd),
                           EventKey(EventTag::kListen, 0), [&](UniqueFd) { ++accepted; });
  REQUIRE(made.ok());
  LoopListener& l = **made;
  CHECK(!l.Tick(Clock::now()).has_value());  // not paused: no deadline

  const Clock::time_point t0 = Clock::now();
  l.AcceptAll();  // accept() fails (not listening): a pause of 10 ms
  REQUIRE(l.paused());
  CHECK(l.backoff().failures() == 1);
  CHECK(l.backoff().pause() == 10ms);
  std::optional<Clock::time_point> resume = l.Tick(t0);
  REQUIRE(resume.has_value());
  CHECK(*resume >= t0 + 10ms);
  l.AcceptAll();  // paused: not even tried
  CHECK(l.backoff().failures() == 1);

  // Past the pause: it tries again, fails again, pauses twice as long.
  resume = l.Tick(*resume);
  REQUIRE(resume.has_value());
  CHECK(l.paused());
  CHECK(l.backoff().failures() == 2);
  CHECK(l.backoff().pause() == 20ms);

  // Now it could accept, but while paused the loop does not watch it.
  REQUIRE(::listen(raw, 4) == 0);
  UniqueFd client = sock.Connect();
  int events = 0;
  absl::StatusOr<int> n = (*loop)->RunOnce(0, [&](uint64_t, uint32_t) { ++events; });
  REQUIRE(n.ok());
  CHECK(events == 0);
  CHECK(accepted == 0);

  // Past the pause: the connection is accepted and the episode is over.
  CHECK(!l.Tick(*resume).has_value());
  CHECK(!l.paused());
  CHECK(accepted == 1);
  CHECK(!l.backoff().in_episode());
  CHECK(l.backoff().pause() == Clock::duration::zero());

  // Watched again: the next connection is an event of the loop.
  UniqueFd second = sock.Connect();
  n = (*loop)->RunOnce(1000, [&](uint64_t key, uint32_t) {
    ++events;
    if (TagOf(key) == EventTag::kListen) l.AcceptAll();
  });
  REQUIRE(n.ok());
  CHECK(events == 1);
  CHECK(accepted == 2);
}

}  // namespace
}  // namespace conveyor
