// The workers' CPU budget (EngineOptions::cpu_budget; core/engine/scheduler.h):
// its bounds, the pool it sizes, a stream that still runs to its end under
// it, and a worker held back by it that shutdown wakes. What it holds the
// process to over time is measured by bench/cpu_budget_bench.py, not here
// (no timed unit tests).
#include <cstring>

#include <catch2/catch.hpp>

#include "core/base/thread_cpu_clock.h"
#include "core/decode/sample_decoder.h"
#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Drain;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::TempDir;
using testing::WaitFor;

// Spins for 2 ms of its thread's CPU time, then writes zeros.
class BurnDecoder final : public SampleDecoder {
 public:
  absl::Status Run(std::span<const uint8_t>, const TransformSpec& spec, Rng&,
                   uint8_t* out) override {
    const int64_t start = ThreadCpuNs();
    while (ThreadCpuNs() - start < 2'000'000) {
    }
    std::memset(out, 0, SampleBytes(spec));
    return absl::OkStatus();
  }
};

TEST_CASE("cpu_budget must be 0 or a positive finite number", "[engine][budget]") {
  for (double b :
       {-1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    EngineOptions o;
    o.num_threads = 2;
    o.cpu_budget = b;
    auto e = Engine::Create(o);
    REQUIRE_FALSE(e.ok());
    CHECK(std::string(e.status().message()).find("cpu_budget") != std::string::npos);
  }
}

TEST_CASE("a CPU budget caps the pool at its CPUs rounded up", "[engine][budget]") {
  EngineOptions o;
  o.num_threads = 8;
  o.cpu_budget = 1;
  CHECK(MakeEngine(8, o)->num_threads() == 1);
  o.cpu_budget = 1.5;
  CHECK(MakeEngine(8, o)->num_threads() == 2);
  o.cpu_budget = 0.25;
  CHECK(MakeEngine(8, o)->num_threads() == 1);
  o.cpu_budget = 16;
  CHECK(MakeEngine(8, o)->num_threads() == 8);  // threads stays the bound
  o.cpu_budget = 0;
  CHECK(MakeEngine(8, o)->num_threads() == 8);  // no budget: as before
}

TEST_CASE("a stream runs to its end under a fractional budget", "[engine][budget]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 6);
  auto p = MakePipeline(dir.path());
  EngineOptions o;
  o.cpu_budget = 0.5;
  o.decoder_factory = [] { return std::make_unique<BurnDecoder>(); };
  auto engine = MakeEngine(4, o);
  StreamOptions so;
  so.batch_size = 4;
  so.num_epochs = 2;
  auto s = engine->OpenStream(p, so);
  REQUIRE(s.ok());
  const testing::Collected got = Drain(**s);
  CHECK(got.end.ok());
  CHECK(got.batches.size() == 6);  // 12 samples × 2 epochs / 4
  // (Whether the worker had to wait depends on how much CPU the host gave
  // it: not asserted. The test below makes it wait for certain.)
}

TEST_CASE("shutdown wakes a worker the budget holds back", "[engine][budget]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  auto p = MakePipeline(dir.path());
  EngineOptions o;
  // A millionth of a CPU: after its first 2 ms decode the worker would wait
  // over half an hour for the bucket to refill.
  o.cpu_budget = 1e-6;
  o.decoder_factory = [] { return std::make_unique<BurnDecoder>(); };
  auto engine = MakeEngine(2, o);
  StreamOptions so;
  so.num_epochs = 0;
  auto s = engine->OpenStream(p, so);
  REQUIRE(s.ok());
  REQUIRE(WaitFor([&] { return engine->scheduler_stats().budget_waits > 0; }));
  // Returns only once every worker left its wait (a hang fails the test
  // at its timeout).
  engine->Shutdown();
  auto next = (*s)->Next(absl::Seconds(10));
  CHECK_FALSE(next.ok());
  CHECK(next.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace conveyor
