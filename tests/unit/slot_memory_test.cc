// SlotMemory (core/engine/slot_memory.h) and the SlotArena that keeps it: a
// shared kind gets a sealed memfd, kPrivate private memory; every kind's
// name is distinct.
#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "core/engine/slot_arena.h"
#include "core/engine/slot_memory.h"

namespace conveyor {
namespace {

constexpr SlotMemory kAll[] = {SlotMemory::kPrivate, SlotMemory::kMemfd, SlotMemory::kPinnedMemfd,
                               SlotMemory::kDevice};

TEST_CASE("slot memory kinds have distinct names and only kPrivate is unshared", "[slot_memory]") {
  std::set<std::string> names;
  for (SlotMemory m : kAll) names.insert(SlotMemoryName(m));
  CHECK(names == std::set<std::string>{"private", "memfd", "pinned_memfd", "device"});
  CHECK(!IsShared(SlotMemory::kPrivate));
  CHECK(IsShared(SlotMemory::kMemfd));
  CHECK(IsShared(SlotMemory::kPinnedMemfd));
  CHECK(IsShared(SlotMemory::kDevice));
}

TEST_CASE("a slot arena keeps its kind: a memfd for shared kinds, private memory otherwise",
          "[slot_memory][slot_arena]") {
  for (SlotMemory m : kAll) {
    INFO(SlotMemoryName(m));
    auto arena = SlotArena::Create(3, 1000, m, "conveyor-slot-memory-test");
    REQUIRE(arena.ok());
    SlotArena& a = **arena;
    CHECK(a.memory() == m);
    CHECK(a.num_slots() == 3);
    CHECK(a.slot_bytes() % static_cast<size_t>(sysconf(_SC_PAGESIZE)) == 0);
    if (IsShared(m)) {
      REQUIRE(a.fd() >= 0);
      // Sealed: a client cannot shrink the region under the daemon.
      const int seals = fcntl(a.fd(), F_GET_SEALS);
      CHECK((seals & F_SEAL_SHRINK) != 0);
      CHECK((seals & F_SEAL_GROW) != 0);
      CHECK(lseek(a.fd(), 0, SEEK_END) == static_cast<off_t>(a.total_bytes()));
    } else {
      CHECK(a.fd() == -1);
    }
    // Every slot is writable memory of its own.
    for (size_t i = 0; i < a.num_slots(); ++i) a.slot(i)[a.slot_bytes() - 1] = uint8_t(i + 1);
    for (size_t i = 0; i < a.num_slots(); ++i) CHECK(a.slot(i)[a.slot_bytes() - 1] == i + 1);
  }
}

TEST_CASE("a slot arena of no slots is refused whatever its kind", "[slot_memory][slot_arena]") {
  for (SlotMemory m : kAll) {
    CHECK(absl::IsInvalidArgument(SlotArena::Create(0, 4096, m, "x").status()));
    CHECK(absl::IsInvalidArgument(SlotArena::Create(2, 0, m, "x").status()));
  }
}

}  // namespace
}  // namespace conveyor
