// Fair sharing of the worker pool between clients (StreamOptions::client,
// weight; core/engine/scheduler.h): under contention the groups' work goes
// in proportion to their weights, a group that is not reading takes
// nothing, and a group that comes back does not burst past the others.
// Every decode burns a fixed amount of its thread's CPU time, so the
// scheduler's CPU accounting sees equal tasks; the tests assert on counts
// of batches produced over a window, never on speed.
#include <atomic>
#include <cstring>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "core/base/thread_cpu_clock.h"
#include "core/decode/sample_decoder.h"
#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::TempDir;
using testing::WaitFor;

// CPU time each decode costs its thread.
constexpr int64_t kDecodeCpuNs = 300'000;

// Spins until its thread used kDecodeCpuNs of CPU, then writes zeros.
class BurnDecoder final : public SampleDecoder {
 public:
  absl::Status Run(std::span<const uint8_t>, const TransformSpec& spec, Rng&,
                   uint8_t* out) override {
    const int64_t start = ThreadCpuNs();
    while (ThreadCpuNs() - start < kDecodeCpuNs) {
    }
    std::memset(out, 0, SampleBytes(spec));
    return absl::OkStatus();
  }
};

EngineOptions BurnOptions() {
  EngineOptions eo;
  eo.decoder_factory = [] { return std::make_unique<BurnDecoder>(); };
  return eo;
}

StreamOptions Endless(const std::string& client, double weight, uint32_t slots) {
  StreamOptions so;
  so.batch_size = 4;
  so.num_epochs = 0;  // endless
  so.num_slots = slots;
  so.client = client;
  so.weight = weight;
  return so;
}

// Takes and releases a stream's batches on a thread of its own, from the
// moment Start() is called until the stream ends (Cancel); Catch2's
// assertions stay on the main thread (the result is read after Join).
class Reader {
 public:
  explicit Reader(Stream* s) : stream_(s) {
    thread_ = std::thread([this] {
      go_.get_future().wait();
      while (true) {
        auto next = stream_->Next(absl::Seconds(120));
        if (!next.ok() || !next->has_value()) return;
        if (!stream_->Release((*next)->slot).ok()) {
          release_failed_ = true;
          return;
        }
      }
    });
  }
  ~Reader() { Join(); }
  void Start() { go_.set_value(); }
  // REQUIRES: Start was called, and the stream was cancelled.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  bool release_failed() const { return release_failed_; }

 private:
  Stream* const stream_;
  std::promise<void> go_;
  std::atomic<bool> release_failed_{false};
  std::thread thread_;
};

// Batches produced so far by the stream `id` (0 once it is gone).
uint64_t Produced(const Engine& engine, uint64_t id) {
  for (const StreamStats& s : engine.Stats().streams) {
    if (s.stream_id == id) return s.batches_emitted;
  }
  return 0;
}

TEST_CASE("two clients of weights 2 and 1 that contend get 2:1 of the work", "[engine][fair]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 8);
  auto p = MakePipeline(dir.path());
  auto engine = MakeEngine(2, BurnOptions());
  // Many credits, so that a reader descheduled for a while on a busy host
  // does not leave its stream without a free slot (then it would be idle
  // and rightly get less).
  auto heavy = engine->OpenStream(p, Endless("heavy", 2, 32));
  auto light = engine->OpenStream(p, Endless("light", 1, 32));
  REQUIRE(heavy.ok());
  REQUIRE(light.ok());
  const uint64_t h = (*heavy)->id(), l = (*light)->id();
  Reader rh(heavy->get()), rl(light->get());
  rh.Start();
  rl.Start();

  // Past the start (both running), then a window of 300 batches.
  REQUIRE(WaitFor([&] { return Produced(*engine, h) >= 10 && Produced(*engine, l) >= 10; },
                  std::chrono::seconds(60)));
  const uint64_t h0 = Produced(*engine, h), l0 = Produced(*engine, l);
  uint64_t dh = 0, dl = 0;
  REQUIRE(WaitFor(
      [&] {
        dh = Produced(*engine, h) - h0;
        dl = Produced(*engine, l) - l0;
        return dh + dl >= 300;
      },
      std::chrono::seconds(120)));
  (*heavy)->Cancel();
  (*light)->Cancel();
  rh.Join();
  rl.Join();
  CHECK_FALSE(rh.release_failed());
  CHECK_FALSE(rl.release_failed());

  INFO("heavy " << dh << " batches, light " << dl);
  REQUIRE(dl > 0);
  const double ratio = static_cast<double>(dh) / static_cast<double>(dl);
  CHECK(ratio >= 1.8);
  CHECK(ratio <= 2.2);
}

TEST_CASE("streams of one client share its weight", "[engine][fair]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 8);
  auto p = MakePipeline(dir.path());
  auto engine = MakeEngine(2, BurnOptions());
  // Client "two" has two streams, client "one" one; equal weights: the
  // one stream of "one" gets as much as both of "two" together.
  auto a1 = engine->OpenStream(p, Endless("two", 1, 32));
  auto a2 = engine->OpenStream(p, Endless("two", 1, 32));
  auto b = engine->OpenStream(p, Endless("one", 1, 32));
  REQUIRE(a1.ok());
  REQUIRE(a2.ok());
  REQUIRE(b.ok());
  Reader r1(a1->get()), r2(a2->get()), rb(b->get());
  r1.Start();
  r2.Start();
  rb.Start();
  auto two = [&] { return Produced(*engine, (*a1)->id()) + Produced(*engine, (*a2)->id()); };
  auto one = [&] { return Produced(*engine, (*b)->id()); };
  REQUIRE(WaitFor([&] { return two() >= 10 && one() >= 10; }, std::chrono::seconds(60)));
  const uint64_t t0 = two(), o0 = one();
  uint64_t dt = 0, dw = 0;
  REQUIRE(WaitFor(
      [&] {
        dt = two() - t0;
        dw = one() - o0;
        return dt + dw >= 300;
      },
      std::chrono::seconds(120)));
  for (auto* s : {a1->get(), a2->get(), b->get()}) s->Cancel();
  r1.Join();
  r2.Join();
  rb.Join();
  INFO("client two " << dt << " batches, client one " << dw);
  REQUIRE(dw > 0);
  const double ratio = static_cast<double>(dt) / static_cast<double>(dw);
  CHECK(ratio >= 0.9);
  CHECK(ratio <= 1.1);
}

TEST_CASE("a client that is not reading takes nothing and does not burst when it comes back",
          "[engine][fair]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 8);
  auto p = MakePipeline(dir.path());
  auto engine = MakeEngine(2, BurnOptions());
  constexpr uint32_t kSlots = 4;
  auto busy = engine->OpenStream(p, Endless("busy", 1, 32));
  auto idle = engine->OpenStream(p, Endless("idle", 1, kSlots));
  REQUIRE(busy.ok());
  REQUIRE(idle.ok());
  const uint64_t b = (*busy)->id(), i = (*idle)->id();
  Reader rb(busy->get()), ri(idle->get());
  rb.Start();  // the idle client's reader waits

  // Not reading: it fills its credits and then takes nothing while the
  // busy client makes 200 batches.
  REQUIRE(WaitFor([&] { return Produced(*engine, i) == kSlots; }, std::chrono::seconds(60)));
  const uint64_t b0 = Produced(*engine, b);
  REQUIRE(WaitFor([&] { return Produced(*engine, b) >= b0 + 200; }, std::chrono::seconds(120)));
  CHECK(Produced(*engine, i) == kSlots);

  // Back: it starts level with the busy client (equal weights), not 200
  // batches behind it. Its first batches are those it held (produced
  // already); over the next 120 batches it gets about half, and never
  // more than its half and a few batches of slack.
  const uint64_t b1 = Produced(*engine, b), i1 = Produced(*engine, i);
  ri.Start();
  uint64_t db = 0, di = 0;
  REQUIRE(WaitFor(
      [&] {
        db = Produced(*engine, b) - b1;
        di = Produced(*engine, i) - i1;
        return db + di >= 120;
      },
      std::chrono::seconds(120)));
  (*busy)->Cancel();
  (*idle)->Cancel();
  rb.Join();
  ri.Join();
  INFO("after the idle client came back: busy " << db << " batches, idle " << di);
  // Without the clamp of its virtual time it would take all of the first
  // 200 batches. Bound: its half of the window plus 12 batches.
  CHECK(di <= (db + di) / 2 + 12);
  CHECK(db >= 40);  // the busy client is not starved meanwhile
  CHECK(di >= 30);  // and the one that came back gets its share
}

TEST_CASE("a stream's weight must be positive", "[engine][fair]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  auto p = MakePipeline(dir.path());
  auto engine = MakeEngine(1);
  for (double w : {0.0, -1.0, std::numeric_limits<double>::infinity()}) {
    StreamOptions so;
    so.weight = w;
    auto s = engine->OpenStream(p, so);
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.status().message()).find("weight") != std::string::npos);
  }
}

}  // namespace
}  // namespace conveyor
