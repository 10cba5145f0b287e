// The stream tuner (core/engine/autotune.h), first driven by a simulated
// pipeline whose stage costs are inputs — it must reach the pipeline's best
// rate from deliberately bad settings, stay within its bounds, hold still
// once there (noise included), leave a pipeline alone when the client sets
// the pace, and stop retrying a raise that does not pay — then in the engine:
// a stream whose reads are slow gets more of them, and tuning never changes
// a byte of what a stream delivers.
#include "core/engine/autotune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/data/file_reader.h"
#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A pipeline as a queueing model: reads take `read_s` each and run
// min(fetch concurrency, queue capacity, the host's and the bytes' caps) at
// once; decodes take `decode_s` of CPU on min(decode concurrency, threads)
// workers; the client takes at most `client_rate` samples/s. Reports the
// shares the engine would measure for the stage that binds.
struct SimulatedPipeline {
  double read_s = 0.05;
  double decode_s = 0.0025;
  uint32_t threads = 2;
  double host_cap = kInf;   // reads a host serves at once
  double bytes_cap = kInf;  // reads that fit in fetch_queue_bytes
  double client_rate = kInf;
  double noise = 0.0;  // ± relative noise on each tick's rate
  uint64_t seed = 1;

  double Rate(const AutotuneLimits& l) const {
    const double reads =
        std::min({static_cast<double>(l.fetch_concurrency),
                  static_cast<double>(l.fetch_queue_capacity), host_cap, bytes_cap});
    const double decodes = std::min(l.decode_concurrency, threads);
    return std::min({reads / read_s, decodes / decode_s, client_rate});
  }
  double Best(const AutotuneLimits& max) const { return Rate(max); }

  AutotuneObservation Observe(const AutotuneLimits& l, uint64_t tick_ns) {
    const double reads =
        std::min({static_cast<double>(l.fetch_concurrency),
                  static_cast<double>(l.fetch_queue_capacity), host_cap, bytes_cap});
    const double fetch_rate = reads / read_s;
    const double decode_rate = std::min(l.decode_concurrency, threads) / decode_s;
    const double rate = std::min({fetch_rate, decode_rate, client_rate});
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(seed >> 11) / static_cast<double>(1ull << 53);
    AutotuneObservation o;
    o.tick_ns = tick_ns;
    o.samples = static_cast<uint64_t>(rate * (1 + noise * (2 * u - 1)) * tick_ns / 1e9);
    if (rate >= client_rate) return o;  // the client is the bound: it never waits
    o.client_starved = 0.8;
    if (fetch_rate < decode_rate) {
      o.decode_starved = 1 - fetch_rate / decode_rate;
      if (bytes_cap <= std::min<double>(l.fetch_concurrency, l.fetch_queue_capacity)) {
        o.fetch_bytes_full = 0.9;
      } else if (l.fetch_concurrency <= l.fetch_queue_capacity) {
        o.fetch_at_limit = 0.9;  // reads waiting on a capped host count too
      } else {
        o.fetch_queue_full = 0.9;
      }
    } else if (l.decode_concurrency <= threads) {
      o.decode_at_limit = 0.9;
    } else {
      o.decode_no_worker = 0.9;
    }
    return o;
  }
};

struct Run {
  std::vector<AutotuneLimits> limits;  // after each tick
  uint64_t changes = 0;
};

// Drives a tuner with `sim` for `ticks` ticks; checks each tick's limits
// against the bounds.
Run Drive(StreamTuner& tuner, SimulatedPipeline& sim, int ticks, const AutotuneLimits& min,
          const AutotuneLimits& max) {
  Run r;
  for (int i = 0; i < ticks; ++i) {
    tuner.Observe(sim.Observe(tuner.limits(), 250'000'000));
    const AutotuneLimits& l = tuner.limits();
    REQUIRE(l.fetch_concurrency >= min.fetch_concurrency);
    REQUIRE(l.fetch_concurrency <= max.fetch_concurrency);
    REQUIRE(l.decode_concurrency >= min.decode_concurrency);
    REQUIRE(l.decode_concurrency <= max.decode_concurrency);
    REQUIRE(l.fetch_queue_capacity >= min.fetch_queue_capacity);
    REQUIRE(l.fetch_queue_capacity <= max.fetch_queue_capacity);
    r.limits.push_back(l);
  }
  r.changes = tuner.changes();
  return r;
}

// The first tick from which the limits never change again (ticks if they
// change at the last one).
size_t SettledAt(const Run& r) {
  size_t at = 0;
  for (size_t i = 1; i < r.limits.size(); ++i) {
    if (!(r.limits[i] == r.limits[i - 1])) at = i;
  }
  return at;
}

const AutotuneLimits kBad{1, 1, 1};
const AutotuneLimits kMax{64, 2, 68};

TEST_CASE("autotune reaches a latency-bound pipeline's best rate from bad settings", "[autotune]") {
  for (const double noise : {0.0, 0.03}) {
    CAPTURE(noise);
    SimulatedPipeline sim;  // 50 ms reads, 2.5 ms decodes on 2 threads: best 800/s
    sim.noise = noise;
    StreamTuner tuner(StreamTuner::Options{}, kBad, kMax);
    const Run r = Drive(tuner, sim, 400, kBad, kMax);
    const double best = sim.Best(kMax);
    CHECK(sim.Rate(r.limits.back()) >= 0.95 * best);
    // Within bounded time: a few raises of 5 ticks each (1 settling, 4 measured).
    CHECK(SettledAt(r) <= 60);
    INFO(tuner.reason());
    CHECK(r.limits.back().decode_concurrency == 2);
    CHECK(r.limits.back().fetch_concurrency >= 32);
  }
}

TEST_CASE("autotune raises decode concurrency on a CPU-bound local folder", "[autotune]") {
  SimulatedPipeline sim;
  sim.read_s = 0.0001;  // a local disk
  sim.decode_s = 0.005;
  sim.threads = 8;
  const AutotuneLimits max{64, 8, 80};
  StreamTuner tuner(StreamTuner::Options{}, kBad, max);
  const Run r = Drive(tuner, sim, 300, kBad, max);
  CHECK(sim.Rate(r.limits.back()) >= 0.95 * sim.Best(max));
  CHECK(r.limits.back().decode_concurrency == 8);
  // Reads were never the bound: one at a time keeps up.
  CHECK(r.limits.back().fetch_concurrency == 1);
  CHECK_THAT(tuner.reason(), Catch::Contains("decode concurrency at its ceiling 8"));
}

TEST_CASE("autotune leaves a stream alone while its client sets the pace", "[autotune]") {
  SimulatedPipeline sim;
  sim.client_rate = 15;  // slower than the bad settings' 20/s
  StreamTuner tuner(StreamTuner::Options{}, kBad, kMax);
  const Run r = Drive(tuner, sim, 200, kBad, kMax);
  CHECK(r.changes == 0);
  CHECK(r.limits.back() == kBad);
  CHECK_THAT(tuner.reason(), Catch::Contains("the client sets the pace"));
}

TEST_CASE("autotune stops where fetch_queue_bytes binds and says so", "[autotune]") {
  SimulatedPipeline sim;
  sim.bytes_cap = 4;  // four samples' bytes fit in fetch_queue_bytes
  StreamTuner tuner(StreamTuner::Options{}, kBad, kMax);
  const Run r = Drive(tuner, sim, 300, kBad, kMax);
  CHECK(sim.Rate(r.limits.back()) == Approx(sim.Best(kMax)));
  CHECK_THAT(tuner.reason(), Catch::Contains("fetch_queue_bytes"));
  CHECK(SettledAt(r) <= 40);
}

TEST_CASE("autotune undoes a raise that does not pay and backs off before trying again",
          "[autotune]") {
  SimulatedPipeline sim;
  sim.host_cap = 4;  // the host serves 4 reads at a time, however many are asked
  StreamTuner tuner(StreamTuner::Options{}, kBad, kMax);
  const Run r = Drive(tuner, sim, 2000, kBad, kMax);
  CHECK(r.limits.back().fetch_concurrency == 4);
  CHECK(sim.Rate(r.limits.back()) == Approx(sim.Best(kMax)));
  // The trials of 8 reads: each undone, the holds doubling (8, 16, ... 64
  // ticks), so over 2000 ticks a few dozen, not one every few ticks.
  std::vector<size_t> trials;
  for (size_t i = 1; i < r.limits.size(); ++i) {
    if (r.limits[i].fetch_concurrency == 8 && r.limits[i - 1].fetch_concurrency == 4) {
      trials.push_back(i);
    }
  }
  REQUIRE(trials.size() >= 3);
  CHECK(trials.size() <= 2000 / 64 + 6);
  for (size_t i = 2; i < trials.size(); ++i) {
    CHECK(trials[i] - trials[i - 1] >= trials[i - 1] - trials[i - 2]);
  }
  CHECK_THAT(tuner.reason(), Catch::Contains("fetch concurrency"));
}

TEST_CASE("autotune holds still on a CPU-bound pipeline with noisy rates", "[autotune]") {
  SimulatedPipeline sim;
  sim.read_s = 0.0001;
  sim.decode_s = 0.005;
  sim.threads = 2;
  sim.noise = 0.04;
  const AutotuneLimits start{4, 2, 8};
  const AutotuneLimits max{64, 2, 68};
  StreamTuner tuner(StreamTuner::Options{}, start, max);
  const Run r = Drive(tuner, sim, 1000, start, max);
  CHECK(r.changes == 0);
  CHECK(r.limits.back() == start);
}

TEST_CASE("the autotune clock turns held signals into shares of a tick", "[autotune]") {
  AutotuneClock c;
  c.Start(1000);
  c.Set(1u << AutotuneClock::kClientStarved | 1u << AutotuneClock::kFetchAtLimit, 1000);
  c.Set(1u << AutotuneClock::kFetchAtLimit, 1250);
  c.Set(0, 1500);
  c.Set(1u << AutotuneClock::kDecodeAtLimit, 1600);
  c.Set(1u << AutotuneClock::kDecodeAtLimit, 1500);  // an older clock reading adds nothing
  const AutotuneObservation o = c.Take(2000, 7);
  CHECK(o.tick_ns == 1000);
  CHECK(o.samples == 7);
  CHECK(o.client_starved == Approx(0.25));
  CHECK(o.fetch_at_limit == Approx(0.5));
  CHECK(o.decode_at_limit == Approx(0.4));
  CHECK(o.decode_starved == 0);
  // The next tick starts where this one ended, with the signals still held.
  const AutotuneObservation next = c.Take(2500, 0);
  CHECK(next.tick_ns == 500);
  CHECK(next.decode_at_limit == Approx(1.0));
  CHECK(next.fetch_at_limit == 0);
}

// ---------------------------------------------------------------- in the engine

// Reads as pread does, each file after `delay` (a distant disk).
class SlowReader final : public FileReader {
 public:
  explicit SlowReader(std::chrono::milliseconds delay) : delay_(delay) {}
  void BeginRead(int, std::string_view) const override { std::this_thread::sleep_for(delay_); }
  ssize_t Pread(int fd, void* buf, size_t count, off_t offset) const override {
    return pread(fd, buf, count, offset);
  }

 private:
  std::chrono::milliseconds delay_;
};

StreamStats::Autotune StatsOf(const Engine& e) {
  const EngineStats s = e.Stats();
  return s.streams.empty() ? StreamStats::Autotune{} : s.streams.front().autotune;
}

TEST_CASE("a tuned stream with slow reads gets more of them in flight", "[autotune][engine]") {
  testing::TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 16, 32);
  auto p = testing::MakePipeline(dir.path(), 16);
  EngineOptions eo;
  eo.fetch_concurrency = 1;
  eo.fetch_queue_capacity = 1;
  eo.autotune = true;
  eo.autotune_tick = absl::Milliseconds(100);
  eo.autotune_max_fetch_concurrency = 16;
  eo.file_reader = std::make_shared<SlowReader>(std::chrono::milliseconds(20));
  auto engine = testing::MakeEngine(16, eo);
  StreamOptions so;
  so.batch_size = 4;
  so.num_slots = 4;
  so.num_epochs = 0;  // endless
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    while (!stop.load()) {
      auto next = (*stream)->Next(absl::Milliseconds(100));
      if (!next.ok()) return;
      if (next->has_value()) REQUIRE((*stream)->Release((*next)->slot).ok());
    }
  });
  const bool raised = testing::WaitFor([&] { return StatsOf(*engine).fetch_concurrency >= 4; },
                                       std::chrono::seconds(60));
  stop = true;
  consumer.join();
  const StreamStats::Autotune a = StatsOf(*engine);
  INFO(a.reason);
  CHECK(raised);
  CHECK(a.enabled);
  CHECK(a.changes >= 2);
  CHECK(a.fetch_concurrency <= 16);
  CHECK(a.fetch_queue_capacity >= a.fetch_concurrency);
  CHECK(a.fetch_queue_capacity <= 16 + 2 * 16);
}

TEST_CASE("a stream whose client does not read is not tuned", "[autotune][engine]") {
  testing::TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 8, 32);
  auto p = testing::MakePipeline(dir.path(), 16);
  EngineOptions eo;
  eo.fetch_concurrency = 1;
  eo.autotune = true;
  eo.autotune_tick = absl::Milliseconds(20);
  eo.file_reader = std::make_shared<SlowReader>(std::chrono::milliseconds(5));
  auto engine = testing::MakeEngine(2, eo);
  StreamOptions so;
  so.batch_size = 2;
  so.num_slots = 2;
  so.num_epochs = 0;
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());
  // Both credits fill, then nothing is taken: the client sets the pace.
  REQUIRE(testing::WaitFor([&] {
    const EngineStats s = engine->Stats();
    return !s.streams.empty() &&
           s.streams.front().stages[static_cast<int>(Stage::kDeliver)].queue_size == 2;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const StreamStats::Autotune a = StatsOf(*engine);
  INFO(a.reason);
  CHECK(a.fetch_concurrency == 1);
  CHECK_THAT(a.reason, Catch::Contains("the client sets the pace"));
}

TEST_CASE("autotune changes no byte a stream delivers", "[autotune][engine]") {
  testing::TempDir dir;
  testing::MakeImageFolder(dir.path(), 3, 12, 40);
  auto p = testing::MakePipeline(dir.path(), 24);
  StreamOptions so;
  so.batch_size = 5;
  so.num_slots = 3;
  so.num_epochs = 2;
  so.seed = 7;
  EngineOptions plain;
  plain.fetch_concurrency = 1;
  EngineOptions tuned = plain;
  tuned.autotune = true;
  tuned.autotune_tick = absl::Milliseconds(1);
  tuned.file_reader = std::make_shared<SlowReader>(std::chrono::milliseconds(2));
  const testing::Collected a = testing::RunOnce(p, 2, so, plain);
  const testing::Collected b = testing::RunOnce(p, 4, so, tuned);
  REQUIRE(a.end.ok());
  REQUIRE(b.end.ok());
  CHECK(a.images == b.images);
  CHECK(a.labels == b.labels);
  CHECK(a.indices == b.indices);
}

TEST_CASE("the engine refuses autotune settings it cannot use", "[autotune][engine]") {
  EngineOptions o;
  o.autotune = true;
  o.autotune_max_fetch_concurrency = 0;
  CHECK(absl::IsInvalidArgument(Engine::Create(o).status()));
  o.autotune_max_fetch_concurrency = 4;
  o.autotune_tick = absl::ZeroDuration();
  CHECK(absl::IsInvalidArgument(Engine::Create(o).status()));
}

TEST_CASE("the tuner's ceilings follow the engine's options", "[autotune]") {
  EngineOptions o;
  o.num_threads = 6;
  o.fetch_concurrency = 4;
  o.decode_concurrency = 6;
  o.fetch_queue_capacity = 12;
  o.autotune_max_fetch_concurrency = 32;
  const AutotuneLimits m = AutotuneMaxLimits(o);
  CHECK(m.fetch_concurrency == 32);
  CHECK(m.decode_concurrency == 6);
  CHECK(m.fetch_queue_capacity == 44);
  o.fetch_concurrency = 100;  // a configured value above the ceiling stays reachable
  o.decode_concurrency = 9;
  CHECK(AutotuneMaxLimits(o).fetch_concurrency == 100);
  CHECK(AutotuneMaxLimits(o).decode_concurrency == 9);
}

}  // namespace
}  // namespace conveyor
