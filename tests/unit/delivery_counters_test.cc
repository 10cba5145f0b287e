// DeliveryCounters: one cell per pipeline and concrete transport, counts
// that only grow, and the cells of pipelines a config reload adds; the
// data-wait histogram's buckets; stream refusals by code.

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

TEST_CASE("data wait: each wait lands in the first bucket that holds it", "[metrics]") {
  DeliveryCounters c({"train"});
  CHECK(c.FindWait("eval") == nullptr);
  DeliveryCounters::WaitCell* w = c.FindWait("train");
  REQUIRE(w != nullptr);
  w->Add(0);               // bucket 0 (<= 1 ms)
  w->Add(1'000'000);       // exactly 1 ms: bucket 0 (le is inclusive)
  w->Add(1'000'001);       // bucket 1 (<= 2.5 ms)
  w->Add(3'000'000'000);   // bucket 11 (<= 5 s)
  w->Add(60'000'000'000);  // past 10 s: the +Inf bucket
  v1::GetStatsResponse r;
  c.AppendTo(&r);
  REQUIRE(r.data_wait_size() == 1);
  const v1::DataWaitStats& d = r.data_wait(0);
  CHECK(d.pipeline() == "train");
  REQUIRE(d.bucket_upper_ns_size() == 13);
  REQUIRE(d.bucket_counts_size() == 14);
  CHECK(d.bucket_upper_ns(0) == 1'000'000);
  CHECK(d.bucket_upper_ns(12) == 10'000'000'000);
  CHECK(d.bucket_counts(0) == 2);
  CHECK(d.bucket_counts(1) == 1);
  CHECK(d.bucket_counts(11) == 1);
  CHECK(d.bucket_counts(13) == 1);
  CHECK(d.count() == 5);
  CHECK(d.sum_ns() == 0 + 1'000'000 + 1'000'001 + 3'000'000'000 + 60'000'000'000);
}

TEST_CASE("data wait: a reload's new pipelines get a histogram, zeros included", "[metrics]") {
  DeliveryCounters c({"train"});
  c.AddPipelines({"train", "eval"});
  v1::GetStatsResponse r;
  c.AppendTo(&r);
  REQUIRE(r.data_wait_size() == 2);
  CHECK(r.data_wait(0).pipeline() == "eval");
  CHECK(r.data_wait(0).count() == 0);
  CHECK(r.data_wait(0).bucket_counts_size() == 14);
}

TEST_CASE("stream refusals: every code but OK, counted from zero", "[metrics]") {
  StreamRefusals refusals;
  refusals.Add(absl::StatusCode::kResourceExhausted);
  refusals.Add(absl::StatusCode::kResourceExhausted);
  refusals.Add(absl::StatusCode::kNotFound);
  v1::GetStatsResponse r;
  refusals.AppendTo(&r);
  const auto& by_code = r.streams_refused_by_code();
  CHECK(by_code.size() == 16);
  CHECK(by_code.count("ok") == 0);
  CHECK(by_code.at("resource_exhausted") == 2);
  CHECK(by_code.at("not_found") == 1);
  CHECK(by_code.at("unauthenticated") == 0);
  CHECK(by_code.at("unavailable") == 0);
}

}  // namespace
}  // namespace conveyor::server
