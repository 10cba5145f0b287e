// core/gpu/unique_handle.h: a handle is closed exactly once, by its last
// owner; moves hand it over; Release gives it up; Reset closes the old one.
#include "core/gpu/unique_handle.h"

#include <vector>

#include <catch2/catch.hpp>

namespace conveyor::gpu {
namespace {

std::vector<int> closed;

struct FakeTraits {
  using Handle = int;
  static Handle Null() { return -1; }
  static bool IsNull(Handle h) { return h == -1; }
  static void Close(Handle h) { closed.push_back(h); }
};
using UniqueFake = UniqueHandle<FakeTraits>;

}  // namespace

TEST_CASE("gpu unique handle: closes once, moves, releases, resets", "[gpu]") {
  closed.clear();
  {
    UniqueFake a(3);
    CHECK(a.valid());
    CHECK(a.get() == 3);
    UniqueFake b(std::move(a));
    CHECK_FALSE(a.valid());
    CHECK(b.get() == 3);
    UniqueFake c(4);
    c = std::move(b);  // closes 4, takes 3
    CHECK(closed == std::vector<int>{4});
    c.Reset(5);  // closes 3
    CHECK(closed == std::vector<int>{4, 3});
    UniqueFake d(6);
    CHECK(d.Release() == 6);
    CHECK_FALSE(d.valid());
    UniqueFake empty;
    CHECK_FALSE(empty);
  }
  CHECK(closed == std::vector<int>{4, 3, 5});  // 6 was released, the empty one never closed
}

}  // namespace conveyor::gpu
