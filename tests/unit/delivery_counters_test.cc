// DeliveryCounters: one cell per pipeline and concrete transport, counts
// that only grow, and the cells of pipelines a config reload adds.

#include "server/service/delivery_counters.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

namespace conveyor::server {
namespace {

std::vector<std::string> Pairs(const v1::GetStatsResponse& r) {
  std::vector<std::string> out;
  for (const v1::DeliveryStats& d : r.deliveries()) {
    out.push_back(d.pipeline() + "/" + d.transport() + "=" + std::to_string(d.images()));
  }
  return out;
}

TEST_CASE("delivery counters: a cell per pipeline and transport, none for others", "[metrics]") {
  DeliveryCounters c({"train"});
  REQUIRE(c.Find("train", v1::SHARED_MEMORY) != nullptr);
  CHECK(c.Find("train", v1::TRANSPORT_AUTO) == nullptr);
  CHECK(c.Find("eval", v1::SHARED_MEMORY) == nullptr);
  c.Find("train", v1::INLINE)->Add(8, 100);
  v1::GetStatsResponse r;
  c.AppendTo(&r);
  CHECK(r.deliveries_size() == 3);
  CHECK(r.deliveries(0).batches() + r.deliveries(1).batches() + r.deliveries(2).batches() == 1);
}

TEST_CASE("delivery counters: a reload's new pipelines get cells, old counts stay",
          "[metrics][reload]") {
  DeliveryCounters c({"train"});
  DeliveryCounters::Cell* train = c.Find("train", v1::SHARED_MEMORY);
  train->Add(4, 10);
  // Readers and writers while the reload adds cells.
  std::thread reader([&] {
    for (int i = 0; i < 200; ++i) {
      v1::GetStatsResponse r;
      c.AppendTo(&r);
      c.Find("eval", v1::DATA_SOCKET);
    }
  });
  c.AddPipelines({"train", "eval"});
  reader.join();
  REQUIRE(c.Find("eval", v1::DATA_SOCKET) != nullptr);
  CHECK(c.Find("train", v1::SHARED_MEMORY) == train);  // the same cell: counts kept
  c.Find("eval", v1::DATA_SOCKET)->Add(2, 5);
  v1::GetStatsResponse r;
  c.AppendTo(&r);
  const std::vector<std::string> pairs = Pairs(r);
  REQUIRE(pairs.size() == 6);
  CHECK(std::count(pairs.begin(), pairs.end(), "train/shared_memory=4") == 1);
  CHECK(std::count(pairs.begin(), pairs.end(), "eval/data_socket=2") == 1);
}

}  // namespace
}  // namespace conveyor::server
