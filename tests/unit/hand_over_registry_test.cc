// Tests of the hand-over registry (server/transport/hand_over_registry.h)
// on its own, with fd sources made in the test: the fd goes only to the
// right secret of a registered stream, with one refusal for a wrong secret
// and an unknown id; a hand-over sets the shared flag and wakes the stream
// only once its source succeeded; the source, the wake and the destruction
// of a dropped entry run outside the registry's lock; Unregister drops the
// entry (and what its source holds). Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "server/transport/hand_over_registry.h"

namespace conveyor::server {
namespace {

constexpr uint64_t kStream = 7;

// A memfd whose first byte is `mark`.
UniqueFd MarkedMemfd(uint8_t mark) {
  UniqueFd fd(::memfd_create("hand-over-registry-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  REQUIRE(::pwrite(fd.get(), &mark, 1, 0) == 1);
  return fd;
}

uint8_t FirstByte(const UniqueFd& fd) {
  uint8_t byte = 0;
  REQUIRE(::pread(fd.get(), &byte, 1, 0) == 1);
  return byte;
}

// A source handing over duplicates of `fd`, counting its calls.
HandOverRegistry::FdSource DupSource(std::shared_ptr<UniqueFd> fd,
                                     std::shared_ptr<std::atomic<int>> calls) {
  return [fd, calls]() -> absl::StatusOr<UniqueFd> {
    ++*calls;
    UniqueFd dup(::fcntl(fd->get(), F_DUPFD_CLOEXEC, 0));
    if (!dup) return PosixError("dup", errno);
    return dup;
  };
}

Secret Flipped(Secret secret, size_t at) {
  secret[at] ^= 0x01;
  return secret;
}

// Whether the registry's lock is free right now, asked from another thread
// (Contains takes the lock) so that a held lock shows as a timeout, not as
// a deadlock of the asking thread. The helper thread is joined later, once
// the lock is free again in any case.
struct LockProbe {
  explicit LockProbe(const HandOverRegistry* registry) : registry(registry) {}
  ~LockProbe() {
    if (helper.joinable()) helper.join();
  }
  void Probe() {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> future = done->get_future();
    helper = std::thread([this, done] {
      (void)registry->Contains(kStream);
      done->set_value();
    });
    free = future.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  }
  const HandOverRegistry* registry;
  std::thread helper;
  bool free = false;
};

TEST_CASE("hand-over registry: the right secret gets the source's fd, sets the flag and wakes",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  auto region = std::make_shared<UniqueFd>(MarkedMemfd(0x5a));
  auto calls = std::make_shared<std::atomic<int>>(0);
  int wakes = 0;
  auto registered = registry.Register(kStream, DupSource(region, calls), [&wakes] { ++wakes; });
  REQUIRE(registered.ok());
  CHECK(registry.Contains(kStream));
  CHECK_FALSE(registry.Contains(kStream + 1));
  CHECK(registered->secret != Secret{});
  REQUIRE(registered->handed_over != nullptr);
  CHECK_FALSE(registered->handed_over->load());
  CHECK(*calls == 0);

  absl::StatusOr<UniqueFd> fd = registry.HandOver(kStream, registered->secret);
  REQUIRE(fd.ok());
  CHECK(fd->get() != region->get());
  CHECK(FirstByte(*fd) == 0x5a);
  CHECK(registered->handed_over->load());
  CHECK(wakes == 1);
  CHECK(*calls == 1);

  // Each request gets a new fd and wakes again; the flag stays set.
  absl::StatusOr<UniqueFd> again = registry.HandOver(kStream, registered->secret);
  REQUIRE(again.ok());
  CHECK(again->get() != fd->get());
  CHECK(FirstByte(*again) == 0x5a);
  CHECK(registered->handed_over->load());
  CHECK(wakes == 2);
}

TEST_CASE("hand-over registry: a wrong secret and an unknown id get the same refusal",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  auto calls = std::make_shared<std::atomic<int>>(0);
  int wakes = 0;
  auto registered = registry.Register(
      kStream, DupSource(std::make_shared<UniqueFd>(MarkedMemfd(1)), calls), [&wakes] { ++wakes; });
  REQUIRE(registered.ok());

  const Secret& right = registered->secret;
  for (const Secret& wrong : {Flipped(right, 0), Flipped(right, kSecretBytes - 1), Secret{}}) {
    absl::Status refused = registry.HandOver(kStream, wrong).status();
    CHECK(absl::IsPermissionDenied(refused));
    CHECK(refused.message() == "unknown stream or wrong secret");
  }
  absl::Status unknown = registry.HandOver(kStream + 1, right).status();
  CHECK(absl::IsPermissionDenied(unknown));
  CHECK(unknown.message() == "unknown stream or wrong secret");

  CHECK(*calls == 0);
  CHECK(wakes == 0);
  CHECK_FALSE(registered->handed_over->load());
}

TEST_CASE("hand-over registry: a failing source is reported, with no flag and no wake",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  int wakes = 0;
  auto registered = registry.Register(
      kStream,
      []() -> absl::StatusOr<UniqueFd> { return absl::UnavailableError("the driver is busy"); },
      [&wakes] { ++wakes; });
  REQUIRE(registered.ok());
  absl::Status failed = registry.HandOver(kStream, registered->secret).status();
  CHECK(absl::IsUnavailable(failed));
  CHECK(failed.message() == "the driver is busy");
  CHECK_FALSE(registered->handed_over->load());
  CHECK(wakes == 0);
  CHECK(registry.Contains(kStream));
}

TEST_CASE("hand-over registry: without a wake callback the hand-over still works",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto registered = registry.Register(
      kStream, DupSource(std::make_shared<UniqueFd>(MarkedMemfd(3)), calls), nullptr);
  REQUIRE(registered.ok());
  absl::StatusOr<UniqueFd> fd = registry.HandOver(kStream, registered->secret);
  REQUIRE(fd.ok());
  CHECK(FirstByte(*fd) == 3);
  CHECK(registered->handed_over->load());
}

TEST_CASE("hand-over registry: an empty source is refused at Register", "[hand_over_registry]") {
  HandOverRegistry registry;
  auto registered = registry.Register(kStream, nullptr, [] {});
  CHECK(absl::IsInvalidArgument(registered.status()));
  CHECK_FALSE(registry.Contains(kStream));
}

TEST_CASE("hand-over registry: streams have their own secrets and fds", "[hand_over_registry]") {
  HandOverRegistry registry;
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto a =
      registry.Register(1, DupSource(std::make_shared<UniqueFd>(MarkedMemfd(0xa)), calls), nullptr);
  auto b =
      registry.Register(2, DupSource(std::make_shared<UniqueFd>(MarkedMemfd(0xb)), calls), nullptr);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->secret != b->secret);
  CHECK(absl::IsPermissionDenied(registry.HandOver(1, b->secret).status()));
  CHECK(absl::IsPermissionDenied(registry.HandOver(2, a->secret).status()));
  absl::StatusOr<UniqueFd> fd_b = registry.HandOver(2, b->secret);
  REQUIRE(fd_b.ok());
  CHECK(FirstByte(*fd_b) == 0xb);
  CHECK(b->handed_over->load());
  CHECK_FALSE(a->handed_over->load());
}

TEST_CASE("hand-over registry: Unregister drops the entry and what its source holds",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  auto region = std::make_shared<UniqueFd>(MarkedMemfd(4));
  std::weak_ptr<UniqueFd> held = region;
  auto calls = std::make_shared<std::atomic<int>>(0);
  auto registered = registry.Register(kStream, DupSource(std::move(region), calls), nullptr);
  REQUIRE(registered.ok());
  CHECK_FALSE(held.expired());

  registry.Unregister(kStream + 1);  // not registered: nothing happens
  CHECK(registry.Contains(kStream));

  registry.Unregister(kStream);
  CHECK_FALSE(registry.Contains(kStream));
  CHECK(held.expired());
  absl::Status refused = registry.HandOver(kStream, registered->secret).status();
  CHECK(absl::IsPermissionDenied(refused));
  CHECK(refused.message() == "unknown stream or wrong secret");
  CHECK(*calls == 0);
  // The transport's share of the flag outlives the entry.
  CHECK_FALSE(registered->handed_over->load());
  registry.Unregister(kStream);  // twice: nothing happens
}

TEST_CASE("hand-over registry: the source and the wake run outside the lock",
          "[hand_over_registry]") {
  HandOverRegistry registry;
  LockProbe in_source(&registry);
  LockProbe in_wake(&registry);
  auto region = std::make_shared<UniqueFd>(MarkedMemfd(5));
  auto registered = registry.Register(
      kStream,
      [&in_source, region]() -> absl::StatusOr<UniqueFd> {
        in_source.Probe();
        return UniqueFd(::fcntl(region->get(), F_DUPFD_CLOEXEC, 0));
      },
      [&in_wake] { in_wake.Probe(); });
  REQUIRE(registered.ok());
  absl::StatusOr<UniqueFd> fd = registry.HandOver(kStream, registered->secret);
  REQUIRE(fd.ok());
  CHECK(in_source.free);
  CHECK(in_wake.free);
}

TEST_CASE("hand-over registry: a dropped entry is destroyed outside the lock",
          "[hand_over_registry]") {
  // Probes the lock from its destructor, which runs when the last copy of
  // the source goes.
  struct ProbeOnDestruction {
    explicit ProbeOnDestruction(LockProbe* probe) : probe(probe) {}
    ~ProbeOnDestruction() { probe->Probe(); }
    LockProbe* probe;
  };
  HandOverRegistry registry;
  LockProbe on_unregister(&registry);
  LockProbe on_replace(&registry);
  auto source_probing = [](LockProbe* probe) -> HandOverRegistry::FdSource {
    auto guard = std::make_shared<ProbeOnDestruction>(probe);
    return [guard]() -> absl::StatusOr<UniqueFd> { return absl::InternalError("unused"); };
  };

  // Registering the same id again replaces the entry; the old one goes.
  REQUIRE(registry.Register(kStream, source_probing(&on_replace), nullptr).ok());
  REQUIRE(registry.Register(kStream, source_probing(&on_unregister), nullptr).ok());
  CHECK(on_replace.free);
  registry.Unregister(kStream);
  CHECK(on_unregister.free);
}

TEST_CASE("hand-over registry: hand-overs race Unregister safely", "[hand_over_registry]") {
  HandOverRegistry registry;
  auto region = std::make_shared<UniqueFd>(MarkedMemfd(6));
  auto calls = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> stop{false};
  std::vector<Secret> secrets(16);
  for (uint64_t id = 0; id < secrets.size(); ++id) {
    auto registered = registry.Register(id, DupSource(region, calls), nullptr);
    REQUIRE(registered.ok());
    secrets[id] = registered->secret;
  }
  std::atomic<int> got{0};
  std::atomic<int> other{0};
  std::vector<std::thread> askers;
  for (int t = 0; t < 3; ++t) {
    askers.emplace_back([&] {
      while (!stop.load()) {
        for (uint64_t id = 0; id < secrets.size(); ++id) {
          absl::StatusOr<UniqueFd> fd = registry.HandOver(id, secrets[id]);
          if (fd.ok() && fd->valid()) {
            ++got;
          } else if (!absl::IsPermissionDenied(fd.status())) {
            ++other;
          }
        }
      }
    });
  }
  // Unregister only once the askers are getting fds, then one id at a time.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (uint64_t id = 0; id < secrets.size(); ++id) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    registry.Unregister(id);
  }
  // Every entry is gone: from now on every request is refused.
  for (uint64_t id = 0; id < secrets.size(); ++id) CHECK_FALSE(registry.Contains(id));
  stop = true;
  for (std::thread& t : askers) t.join();
  CHECK(other == 0);
  CHECK(got > 0);
  for (uint64_t id = 0; id < secrets.size(); ++id) {
    CHECK(absl::IsPermissionDenied(registry.HandOver(id, secrets[id]).status()));
  }
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
