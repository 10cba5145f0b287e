// The bytes of fetched samples a stream holds are bounded: no fetch starts
// while the stream holds EngineOptions::fetch_queue_bytes of samples waiting
// for decode or being decoded, whatever the fetch queue's item capacity, and
// a read that would take it past that is dropped and read again once there
// is room, whatever the number of reads running.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include <catch2/catch.hpp>

#include "core/data/sample_source.h"
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

constexpr size_t kSampleBytes = 3u << 20;

// Every sample is kSampleBytes of zeros; counts the reads.
class BigSource final : public SampleSource {
 public:
  absl::Status Read(uint64_t, std::vector<uint8_t>* out) const override {
    out->assign(kSampleBytes, 0);
    std::lock_guard<std::mutex> l(mu_);
    ++reads_;
    return absl::OkStatus();
  }
  int reads() const {
    std::lock_guard<std::mutex> l(mu_);
    return reads_;
  }

 private:
  mutable std::mutex mu_;
  mutable int reads_ = 0;
};

// Decodes nothing: waits until the gate opens, then writes zeros.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  void Open() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
};

class GatedDecoder final : public SampleDecoder {
 public:
  explicit GatedDecoder(Gate* gate) : gate_(gate) {}
  absl::Status Run(std::span<const uint8_t>, const TransformSpec& spec, Rng&,
                   uint8_t* out) override {
    std::unique_lock<std::mutex> l(gate_->mu);
    gate_->cv.wait(l, [this] { return gate_->open; });
    std::memset(out, 0, SampleBytes(spec));
    return absl::OkStatus();
  }

 private:
  Gate* gate_;
};

// The engine's stats of the only stream, once `done` holds for them.
StreamStats WaitForStream(Engine& engine, const std::function<bool(const StreamStats&)>& done) {
  StreamStats st;
  const bool reached = WaitFor([&] {
    EngineStats es = engine.Stats();
    if (es.streams.empty()) return false;
    st = es.streams[0];
    return done(st);
  });
  CHECK(reached);
  return st;
}

constexpr int kFetch = static_cast<int>(Stage::kFetch);
constexpr int kDecode = static_cast<int>(Stage::kDecode);

// Samples held by the stream: queued for decode or being decoded.
uint64_t HeldSamples(const StreamStats& st) {
  return st.stages[kDecode].queue_size + st.stages[kDecode].in_flight;
}

// One stream of `samples` BigSource samples in one batch, decoded by a
// GatedDecoder, on an engine of `threads` with the fetch limits given and
// autotune off (the limits stay as set).
struct GatedStream {
  struct Limits {
    uint32_t queue_capacity, fetch_concurrency, decode_concurrency;
    uint64_t fetch_queue_bytes;
  };
  GatedStream(int samples, int threads, Limits limits) {
    MakeImageFolder(dir.path(), 1, samples);
    auto p = MakePipeline(dir.path());
    p->source = source;
    EngineOptions eo;
    eo.autotune = false;
    eo.fetch_queue_capacity = limits.queue_capacity;
    eo.fetch_concurrency = limits.fetch_concurrency;
    eo.decode_concurrency = limits.decode_concurrency;
    eo.fetch_queue_bytes = limits.fetch_queue_bytes;
    eo.decoder_factory = [this] { return std::make_unique<GatedDecoder>(&gate); };
    engine = MakeEngine(threads, eo);
    StreamOptions so;
    so.batch_size = static_cast<uint32_t>(samples);
    so.shuffle = false;
    auto s = engine->OpenStream(p, so);
    REQUIRE(s.ok());
    stream = *std::move(s);
  }
  // Opens the gate and reads the batch: every sample delivered.
  void DrainAll(int samples) {
    gate.Open();
    const testing::Collected got = Drain(*stream);
    CHECK(got.end.ok());
    REQUIRE(got.batches.size() == 1);
    CHECK(got.batches[0].num_samples == static_cast<uint32_t>(samples));
  }
  TempDir dir;
  std::shared_ptr<BigSource> source = std::make_shared<BigSource>();
  Gate gate;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Stream> stream;
};

TEST_CASE(
    "a stream holds at most fetch_queue_bytes of fetched samples; a read that does not fit "
    "waits and is read again",
    "[engine][memory]") {
  // Room for every sample by count, but not by bytes: 2 samples of 3 MiB
  // fit in 7 MiB, not 3.
  GatedStream g(6, 2, {8, 1, 1, 7u << 20});
  // With one decode stuck, the third read finds no room: its bytes are
  // dropped and it waits; nothing else is fetched meanwhile.
  const StreamStats st = WaitForStream(*g.engine, [&](const StreamStats& s) {
    return s.fetches_deferred == 1 && s.stages[kFetch].in_flight == 0;
  });
  CHECK(g.source->reads() == 3);
  CHECK(st.stages[kDecode].queue_size == 1);
  CHECK(st.stages[kDecode].in_flight == 1);
  CHECK(st.stages[kFetch].wait_output_ns > 0);
  g.DrainAll(6);
  // The dropped read was read again (and maybe later ones dropped too).
  CHECK(g.source->reads() >= 7);
}

TEST_CASE("reads running at once do not take a stream past fetch_queue_bytes", "[engine][memory]") {
  // 8 reads of 3 MiB at once would hold 24 MiB.
  const uint64_t limit = 7u << 20;
  GatedStream g(16, 4, {16, 8, 1, limit});
  const StreamStats st = WaitForStream(*g.engine, [&](const StreamStats& s) {
    return s.fetches_deferred >= 1 && s.stages[kFetch].in_flight == 0 &&
           s.stages[kDecode].in_flight == 1;
  });
  CHECK(HeldSamples(st) * kSampleBytes <= limit);
  CHECK(HeldSamples(st) == 2);
  g.DrainAll(16);
  CHECK(g.source->reads() > 16);
}

TEST_CASE("a sample larger than fetch_queue_bytes is read alone, never starved",
          "[engine][memory]") {
  GatedStream g(5, 4, {8, 4, 2, 1u << 20});  // less than one sample
  // One sample held (being decoded); reads that ran beside its read were
  // dropped, and nothing more is read while it is held.
  WaitForStream(*g.engine, [&](const StreamStats& s) {
    return s.stages[kFetch].in_flight == 0 && s.stages[kDecode].in_flight == 1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const StreamStats st = g.engine->Stats().streams.at(0);
  CHECK(HeldSamples(st) == 1);
  CHECK(st.stages[kFetch].in_flight == 0);
  CHECK(g.source->reads() == 1 + static_cast<int>(st.fetches_deferred));
  g.DrainAll(5);
}

TEST_CASE("fetch_queue_bytes 0 is refused", "[engine][memory]") {
  EngineOptions eo;
  eo.autotune = false;  // the limits below stay as set
  eo.fetch_queue_bytes = 0;
  auto e = Engine::Create(eo);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == "fetch_queue_bytes must be at least 1");
}

}  // namespace
}  // namespace conveyor
