// Tests of the C++ client's pool arithmetic and server list
// (client/cpp/pool/pool_plan.h, pool_servers.h): ranges cover a stream
// once, each at its first batch's epoch and offset by the sampler's rule;
// fingerprint differences are named; server entries become daemons.
#ifdef CONVEYOR_HAVE_CLIENT
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "client/cpp/pool/pool_plan.h"
#include "client/cpp/pool/pool_servers.h"

namespace conveyor::client {
namespace {

// (epoch, batch index, resume offset) of every batch of the stream.
std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> AllBatches(const RangePlanOptions& o) {
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> out;
  for (uint64_t e = o.first_epoch; e < o.first_epoch + o.num_epochs; ++e) {
    const uint64_t base = e == o.first_epoch ? o.resume_offset : 0;
    const uint64_t left = o.dataset_size - base;
    const uint64_t per_rank =
        o.drop_last ? left / o.world_size : (left + o.world_size - 1) / o.world_size;
    const uint64_t batches = (per_rank + o.batch_size - 1) / o.batch_size;
    for (uint64_t k = 0; k < batches; ++k) {
      out.emplace_back(e, k, base + k * o.batch_size * o.world_size);
    }
  }
  return out;
}

TEST_CASE("pool plan: ranges cover the stream once, each where its first batch is",
          "[client][pool]") {
  struct Case {
    uint64_t n;
    uint32_t batch, world;
    bool drop_last;
    uint32_t range;
    uint64_t base;
  };
  for (const Case& c : std::vector<Case>{{48, 2, 1, false, 2, 0},
                                         {48, 5, 2, false, 3, 0},
                                         {50, 4, 3, true, 2, 0},
                                         {7, 8, 1, false, 4, 0},
                                         {100, 4, 2, false, 3, 37},
                                         {64, 32, 1, false, 8, 0}}) {
    INFO("n " << c.n << " batch " << c.batch << " world " << c.world << " range " << c.range
              << " base " << c.base);
    RangePlanOptions o;
    o.dataset_size = c.n;
    o.batch_size = c.batch;
    o.world_size = c.world;
    o.drop_last = c.drop_last;
    o.first_epoch = 3;
    o.num_epochs = 3;
    o.resume_offset = c.base;
    o.range_batches = c.range;
    auto plan = RangePlan::Create(o);
    REQUIRE(plan.ok());
    const auto flat = AllBatches(o);
    REQUIRE(plan->total() == flat.size());
    uint64_t g = 0;
    while (auto r = plan->Next()) {
      CHECK(r->g == g);
      CHECK(r->count >= 1);
      CHECK(r->count <= c.range);
      CHECK(std::make_tuple(r->epoch, r->first, r->offset) == flat[r->g]);
      CHECK(r->position0 == r->first * c.batch);
      CHECK(plan->epochs_left(r->epoch) == 6 - r->epoch);
      for (uint64_t d = 0; d < r->count; ++d) {
        const BatchRange rest = plan->RangeAt(r->g + d, r->count - d);
        CHECK(std::make_tuple(rest.epoch, rest.first, rest.offset) == flat[r->g + d]);
      }
      g += r->count;
    }
    CHECK(g == flat.size());
  }
  RangePlanOptions endless;
  endless.dataset_size = 10;
  endless.batch_size = 3;
  endless.num_epochs = 0;
  auto plan = RangePlan::Create(endless);
  REQUIRE(plan.ok());
  CHECK(!plan->total().has_value());
  for (int i = 0; i < 100; ++i) REQUIRE(plan->Next().has_value());
  RangePlanOptions empty = endless;
  empty.dataset_size = 3;
  empty.world_size = 4;
  empty.drop_last = true;
  CHECK(absl::IsInvalidArgument(RangePlan::Create(empty).status()));
}

v1::PipelineInfo Info() {
  v1::PipelineInfo p;
  p.set_name("train");
  p.set_dataset_size(48);
  p.add_sample_shape(3);
  p.add_sample_shape(64);
  p.add_sample_shape(64);
  (*p.mutable_fingerprint())["dataset"] = "digest=sha256:aa;samples=48";
  (*p.mutable_fingerprint())["transform"] = "v1;kind=0;mode=0;out=64x64";
  (*p.mutable_fingerprint())["order"] = "global";
  return p;
}

TEST_CASE("pool plan: a fingerprint difference names the part and its field", "[client][pool]") {
  CHECK(!FingerprintDifference(Info(), Info()).has_value());
  v1::PipelineInfo b = Info();
  b.set_dataset_size(49);
  CHECK(FingerprintDifference(Info(), b) == "dataset_size (48 vs 49)");
  b = Info();
  b.add_sample_shape(1);
  CHECK(FingerprintDifference(Info(), b) == "sample_shape ([3, 64, 64] vs [3, 64, 64, 1])");
  b = Info();
  (*b.mutable_fingerprint())["transform"] = "v1;kind=0;mode=1;out=64x64";
  CHECK(FingerprintDifference(Info(), b) == "transform (mode: 0 vs 1)");
  b = Info();
  (*b.mutable_fingerprint())["dataset"] = "digest=sha256:bb;samples=48";
  CHECK(FingerprintDifference(Info(), b) == "dataset (digest: sha256:aa vs sha256:bb)");
  b = Info();
  (*b.mutable_fingerprint())["order"] = "dataset";
  CHECK(FingerprintDifference(Info(), b) == "order (global vs dataset)");
  b = Info();
  b.mutable_fingerprint()->clear();
  CHECK(FingerprintDifference(Info(), b)->find("older conveyord") != std::string::npos);
}

TEST_CASE("pool plan: ranges sized to the buffer by default", "[client][pool]") {
  v1::PipelineInfo p = Info();  // 3 x 64 x 64 uint8: 12 KiB a sample
  p.set_dtype(v1::UINT8);
  CHECK(AutoRangeBatches(p, 32, 4, uint64_t{512} << 20) == 16);   // 384 KiB batches: capped
  CHECK(AutoRangeBatches(p, 2048, 4, uint64_t{512} << 20) == 5);  // 24 MiB batches
  p.set_dtype(v1::FLOAT32);
  CHECK(AutoRangeBatches(p, 2048, 4, uint64_t{512} << 20) == 1);  // 96 MiB: at least 1
}

TEST_CASE("pool servers: entries become daemons, names their addresses", "[client][pool]") {
  std::map<std::string, std::vector<std::string>> answers = {
      {"pool.svc", {"10.0.0.1:7070", "10.0.0.2:7070"}}};
  auto servers = PoolServers::Create(
      {"unix:///run/conveyor/conveyor.sock", "10.0.0.9:7070", "pool.svc:7070", "[fd00::1]:7070"},
      [&](const std::string& host, int) -> absl::StatusOr<std::vector<std::string>> {
        return answers.at(host);
      });
  REQUIRE(servers.ok());
  auto addresses = [&] {
    std::vector<std::string> out;
    for (const PoolEndpoint& e : (*servers)->Current()) out.push_back(e.address);
    return out;
  };
  CHECK((*servers)->has_names());
  CHECK(addresses() == std::vector<std::string>{"unix:///run/conveyor/conveyor.sock",
                                                "10.0.0.9:7070", "[fd00::1]:7070"});
  (*servers)->Resolve();
  CHECK(addresses() == std::vector<std::string>{"unix:///run/conveyor/conveyor.sock",
                                                "10.0.0.9:7070", "10.0.0.1:7070", "10.0.0.2:7070",
                                                "[fd00::1]:7070"});
  const auto eps = (*servers)->Current();
  CHECK(eps[0].entry == 0);
  CHECK(eps[2].name == "pool.svc");
  CHECK(eps[1].name.empty());
  answers["pool.svc"] = {};  // a failed answer keeps the last one
  (*servers)->Resolve();
  CHECK(addresses().size() == 5);
  CHECK((*servers)->Errors().at("pool.svc") == "no address");
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{}, {""}, {"host"}, {"host:0"}, {"[fd00::1]7070"}}) {
    CHECK(absl::IsInvalidArgument(PoolServers::Create(bad).status()));
  }
}

}  // namespace
}  // namespace conveyor::client
#endif  // CONVEYOR_HAVE_CLIENT
