// Bottleneck naming: a stage only while there is load.
#include <catch2/catch.hpp>

#include <vector>

#include "core/engine/stats.h"

namespace conveyor {
namespace {

StreamStats Stream(uint64_t decode_busy_ns, uint64_t fetch_busy_ns, uint64_t collate_wait_out_ns) {
  StreamStats s;
  s.stages[static_cast<int>(Stage::kDecode)].busy_ns = decode_busy_ns;
  s.stages[static_cast<int>(Stage::kFetch)].busy_ns = fetch_busy_ns;
  s.stages[static_cast<int>(Stage::kCollate)].wait_output_ns = collate_wait_out_ns;
  return s;
}

TEST_CASE("stats: no open stream, no bottleneck", "[stats]") {
  CHECK_FALSE(BottleneckUnderLoad({}).has_value());
}

TEST_CASE("stats: open streams that have not worked yet name no bottleneck", "[stats]") {
  CHECK_FALSE(BottleneckUnderLoad({Stream(0, 0, 0), Stream(0, 0, 0)}).has_value());
}

TEST_CASE("stats: the busiest stage of the open streams summed is the bottleneck", "[stats]") {
  // Each stream alone has fetch ahead of decode; summed, decode leads.
  auto b = BottleneckUnderLoad({Stream(5, 6, 0), Stream(9, 0, 0)});
  REQUIRE(b.has_value());
  CHECK(*b == Stage::kDecode);
  b = BottleneckUnderLoad({Stream(5, 60, 0)});
  REQUIRE(b.has_value());
  CHECK(*b == Stage::kFetch);
}

TEST_CASE("stats: producers waiting on the consumer make deliver the bottleneck", "[stats]") {
  auto b = BottleneckUnderLoad({Stream(0, 0, 100)});
  REQUIRE(b.has_value());
  CHECK(*b == Stage::kDeliver);
}

}  // namespace
}  // namespace conveyor
