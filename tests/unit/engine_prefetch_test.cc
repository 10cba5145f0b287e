// The engine announces upcoming samples to the source (SampleSource::
// Prefetch) across the epoch boundary: near the end of an epoch the first
// samples of the next epoch of the stream (its order is a pure function of
// (seed, epoch)) follow, so a network source starts the next epoch warm;
// nothing past the stream's last epoch is announced.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/data/sample_source.h"
#include "core/data/sampler.h"
#include "core/engine/engine.h"
#include "core/engine/stream.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Drain;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::TempDir;

// Reads the files (real bytes) and records, in order, every Prefetch hint
// and every Read.
class RecordingSource final : public SampleSource {
 public:
  struct Event {
    bool read = false;
    uint64_t index = 0;              // Read
    std::vector<uint64_t> upcoming;  // Prefetch
    bool every_sample = false;       // Prefetch
  };
  RecordingSource(std::shared_ptr<const DatasetIndex> d, uint64_t max_bytes)
      : files_(std::move(d), max_bytes) {}
  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override {
    {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(Event{true, index, {}});
    }
    return files_.Read(index, out);
  }
  void Prefetch(std::span<const uint64_t> upcoming, bool every_sample) const override {
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back(
        Event{false, 0, std::vector<uint64_t>(upcoming.begin(), upcoming.end()), every_sample});
  }
  std::vector<Event> events() const {
    std::lock_guard<std::mutex> l(mu_);
    return events_;
  }

 private:
  FileSampleSource files_;
  mutable std::mutex mu_;
  mutable std::vector<Event> events_;
};

// The hints given with each Read (one worker: a fetch task announces, then
// reads), concatenated per read: hints[k] = what was announced with read k.
std::vector<std::vector<uint64_t>> HintsPerRead(const std::vector<RecordingSource::Event>& ev) {
  std::vector<std::vector<uint64_t>> out;
  std::vector<uint64_t> pending;
  for (const auto& e : ev) {
    if (e.read) {
      out.push_back(std::move(pending));
      pending.clear();
    } else {
      pending.insert(pending.end(), e.upcoming.begin(), e.upcoming.end());
    }
  }
  return out;
}

std::vector<uint64_t> Plan(const PipelineConfig& p, const StreamOptions& so, uint64_t epoch) {
  auto plan = RankIndices(SamplerOptionsFor(p, so, epoch));
  REQUIRE(plan.ok());
  return *plan;
}

void CheckAcrossEpochs(int images, uint32_t batch_size, uint64_t epoch_offset,
                       uint32_t world_size = 1, uint32_t rank = 0) {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, images / 2);
  auto p = MakePipeline(dir.path());
  auto source = std::make_shared<RecordingSource>(p->dataset, p->max_file_bytes);
  p->source = source;
  auto engine = MakeEngine(1);
  StreamOptions so;
  so.batch_size = batch_size;
  so.seed = 7;
  so.first_epoch = 3;
  so.num_epochs = 2;
  so.epoch_offset = epoch_offset;
  so.world_size = world_size;
  so.rank = rank;
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());
  const testing::Collected got = Drain(**stream);
  REQUIRE(got.end.ok());

  const std::vector<uint64_t> e3 = Plan(*p, so, 3);
  const std::vector<uint64_t> e4 = Plan(*p, so, 4);
  std::vector<uint64_t> all = e3;
  all.insert(all.end(), e4.begin(), e4.end());
  const auto ev = source->events();
  const auto hints = HintsPerRead(ev);
  REQUIRE(hints.size() == all.size());
  // Only a world of one reads every sample: only then may a source fetch a
  // hinted sample's neighbours with it.
  for (const auto& e : ev) {
    if (!e.read) CHECK(e.every_sample == (world_size == 1));
  }
  // Read k announces the samples after it in the stream's order, up to 256,
  // across the boundary of epochs 3 and 4, never past the stream's end.
  for (size_t k = 0; k < all.size(); ++k) {
    INFO("read " << k << " of " << all.size() << " (epoch 3 has " << e3.size() << ")");
    CHECK(ev.empty() == false);
    const size_t from = k + 1;
    const size_t to = std::min(all.size(), from + 256);
    // The stream plans the next epoch a little ahead: once it is planned
    // every read announces the full window; the last reads of the first
    // epoch always see it.
    if (k + 1 >= e3.size() - std::min<size_t>(e3.size(), 8) || k >= e3.size()) {
      CHECK(hints[k] == std::vector<uint64_t>(all.begin() + from, all.begin() + to));
    }
  }
}

TEST_CASE("Prefetch hints run into the next epoch of the stream, not past its end",
          "[engine][prefetch]") {
  SECTION("epochs shorter than the window") { CheckAcrossEpochs(40, 4, 0); }
  SECTION("epochs longer than the window") { CheckAcrossEpochs(600, 16, 0); }
  SECTION("a resumed first epoch") { CheckAcrossEpochs(300, 8, 100); }
  SECTION("rank 1 of 2") { CheckAcrossEpochs(600, 16, 0, 2, 1); }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// Records, under its own lock, which samples have been read; a hint that
// names a sample whose Read already began is stale (a remote source would
// request it again and keep bytes nobody claims). Each hint is slow (as a
// hint that builds requests is), so that a worker announcing late is likely.
class StaleHintSource final : public SampleSource {
 public:
  StaleHintSource(std::shared_ptr<const DatasetIndex> d, uint64_t max_bytes)
      : files_(std::move(d), max_bytes) {}
  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override {
    {
      std::lock_guard<std::mutex> l(mu_);
      read_.push_back(index);
    }
    return files_.Read(index, out);
  }
  void Prefetch(std::span<const uint64_t> upcoming, bool /*every_sample*/) const override {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    std::lock_guard<std::mutex> l(mu_);
    for (const uint64_t i : upcoming) {
      if (std::find(read_.begin(), read_.end(), i) != read_.end()) ++stale_;
    }
    ++hints_;
  }
  int stale() const {
    std::lock_guard<std::mutex> l(mu_);
    return stale_;
  }
  int hints() const {
    std::lock_guard<std::mutex> l(mu_);
    return hints_;
  }

 private:
  FileSampleSource files_;
  mutable std::mutex mu_;
  mutable std::vector<uint64_t> read_;
  mutable int stale_ = 0;
  mutable int hints_ = 0;
};

TEST_CASE("Prefetch hints never name a sample whose read already began", "[engine][prefetch]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 60);
  auto p = MakePipeline(dir.path());
  auto source = std::make_shared<StaleHintSource>(p->dataset, p->max_file_bytes);
  p->source = source;
  EngineOptions eo;
  eo.fetch_concurrency = 4;
  auto engine = MakeEngine(4, eo);
  StreamOptions so;
  so.batch_size = 8;
  so.num_epochs = 1;  // one epoch: every sample is read once
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());
  const testing::Collected got = Drain(**stream);
  REQUIRE(got.end.ok());
  CHECK(source->hints() > 0);
  CHECK(source->stale() == 0);
}

}  // namespace
}  // namespace conveyor
