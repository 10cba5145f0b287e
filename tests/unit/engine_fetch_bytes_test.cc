// The bytes of fetched samples a stream holds are bounded: no fetch starts
// while the stream holds EngineOptions::fetch_queue_bytes of samples waiting
// for decode or being decoded, whatever the fetch queue's item capacity.
#include <condition_variable>
#include <cstring>
#include <mutex>

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

TEST_CASE("a stream holds at most fetch_queue_bytes of fetched samples (plus the fetches running)",
          "[engine][memory]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 6);
  auto p = MakePipeline(dir.path());
  auto source = std::make_shared<BigSource>();
  p->source = source;
  Gate gate;
  EngineOptions eo;
  eo.fetch_queue_capacity = 8;  // room for every sample by count ...
  eo.fetch_concurrency = 1;
  eo.decode_concurrency = 1;
  eo.fetch_queue_bytes = 7u << 20;  // ... but not by bytes: 3 samples of 3 MiB reach it
  eo.decoder_factory = [&gate] { return std::make_unique<GatedDecoder>(&gate); };
  auto engine = MakeEngine(2, eo);
  StreamOptions so;
  so.batch_size = 6;
  so.shuffle = false;
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());

  // With one decode stuck, fetching stops, blocked, once the stream holds
  // 7 MiB or more: 3 samples (one being decoded, two queued).
  const int fetch = static_cast<int>(Stage::kFetch);
  const int decode = static_cast<int>(Stage::kDecode);
  StreamStats st;
  const bool blocked = WaitFor([&] {
    EngineStats es = engine->Stats();
    if (es.streams.empty()) return false;
    st = es.streams[0];
    return st.stages[fetch].wait_output_ns > 0 && st.stages[fetch].in_flight == 0 &&
           source->reads() >= 3;
  });
  CHECK(blocked);
  CHECK(source->reads() == 3);
  CHECK(st.stages[decode].queue_size == 2);
  CHECK(st.stages[decode].in_flight == 1);

  gate.Open();
  const testing::Collected got = Drain(**stream);
  CHECK(got.end.ok());
  REQUIRE(got.batches.size() == 1);
  CHECK(got.batches[0].num_samples == 6);
  CHECK(source->reads() == 6);
}

TEST_CASE("fetch_queue_bytes 0 is refused", "[engine][memory]") {
  EngineOptions eo;
  eo.fetch_queue_bytes = 0;
  auto e = Engine::Create(eo);
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message() == "fetch_queue_bytes must be at least 1");
}

}  // namespace
}  // namespace conveyor
