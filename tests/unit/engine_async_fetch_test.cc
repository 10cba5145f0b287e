// Fetches of a source that reads asynchronously (a network source) never
// hold a worker: with 2 workers and a stream whose reads hang, another
// stream still runs to its end; a shutdown with reads pending returns at
// once (the pending reads are cancelled); cancelling the hanging stream
// cancels its reads and the stream leaves. The test source's reads complete
// only when the test says so; its synchronous Read blocks as a network read
// did before fetches were asynchronous, so an engine that read it on a worker
// stalls and these tests fail at their deadline. Last, a cancel reaches a
// decode that is running, where the decode checks its time budget.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/data/pending_read.h"
#include "core/data/sample_source.h"
#include "core/decode/ffmpeg/decode_budget.h"
#include "core/decode/sample_decoder.h"
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
using testing::WaitFor;

// Reads the dataset's files, but only once Release() is called: until then
// ReadAsync keeps each read pending (and Read blocks).
class HangingSource final : public SampleSource {
 public:
  HangingSource(std::shared_ptr<const DatasetIndex> d, uint64_t max_bytes)
      : files_(std::move(d), max_bytes) {}

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override {
    std::unique_lock<std::mutex> l(mu_);
    ++blocked_reads_;
    cv_.wait(l, [this] { return released_; });
    l.unlock();
    return files_.Read(index, out);
  }

  bool reads_asynchronously() const override { return true; }

  std::shared_ptr<PendingRead> ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                         ReadDone done) const override {
    auto r = std::make_shared<Op>();
    r->source = this;
    r->index = index;
    r->out = out;
    r->done = std::move(done);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!released_) {
        pending_.push_back(r);
        return r;
      }
    }
    r->Finish(files_.Read(index, out));
    return nullptr;
  }

  // Completes every pending read with its file's bytes, and every later one
  // at once.
  void Release() {
    std::vector<std::shared_ptr<Op>> now;
    {
      std::lock_guard<std::mutex> l(mu_);
      released_ = true;
      now.swap(pending_);
    }
    cv_.notify_all();
    for (const auto& r : now) {
      std::vector<uint8_t> bytes;
      const absl::Status st = files_.Read(r->index, &bytes);
      r->FinishWith(st, &bytes);
    }
  }

  // Reads started and not finished (pending, or blocked in Read).
  int waiting() const {
    std::lock_guard<std::mutex> l(mu_);
    int n = blocked_reads_;
    for (const auto& r : pending_) {
      if (!r->finished) ++n;
    }
    return n;
  }
  int cancelled() const { return cancelled_.load(); }
  int completed() const { return completed_.load(); }

 private:
  struct Op final : PendingRead {
    const HangingSource* source = nullptr;
    uint64_t index = 0;
    std::vector<uint8_t>* out = nullptr;
    ReadDone done;  // guarded by source->mu_ until taken
    bool finished = false;

    void Cancel() override {
      ReadDone d;
      {
        std::lock_guard<std::mutex> l(source->mu_);
        if (finished) return;
        finished = true;
        d = std::move(done);
      }
      source->cancelled_.fetch_add(1);
      d(absl::CancelledError("test read cancelled"));
    }
    Progress progress() const override { return Progress{"test-object", "test-host", 7}; }

    // Finishes with bytes already in *out.
    void Finish(absl::Status st) {
      ReadDone d;
      {
        std::lock_guard<std::mutex> l(source->mu_);
        if (finished) return;
        finished = true;
        d = std::move(done);
      }
      source->completed_.fetch_add(1);
      d(std::move(st));
    }
    // Finishes with `bytes` moved into *out, unless it was cancelled.
    void FinishWith(absl::Status st, std::vector<uint8_t>* bytes) {
      ReadDone d;
      {
        std::lock_guard<std::mutex> l(source->mu_);
        if (finished) return;
        finished = true;
        d = std::move(done);
        out->swap(*bytes);
      }
      source->completed_.fetch_add(1);
      d(std::move(st));
    }
  };

  FileSampleSource files_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable bool released_ = false;
  mutable int blocked_reads_ = 0;
  mutable std::vector<std::shared_ptr<Op>> pending_;
  mutable std::atomic<int> cancelled_{0};
  mutable std::atomic<int> completed_{0};
};

// Releases the source's reads when the test ends, whichever way: an engine
// whose workers were stuck in Read could not shut down otherwise.
struct ReleaseAtExit {
  HangingSource* source;
  ~ReleaseAtExit() { source->Release(); }
};

struct Fixture {
  TempDir dir;
  std::shared_ptr<PipelineConfig> local;
  std::shared_ptr<PipelineConfig> hanging;
  std::shared_ptr<HangingSource> source;
  Fixture() {
    MakeImageFolder(dir.path(), 2, 32);  // 64 images
    local = MakePipeline(dir.path());
    hanging = MakePipeline(dir.path());
    hanging->name = "hanging";
    source = std::make_shared<HangingSource>(hanging->dataset, hanging->max_file_bytes);
    hanging->source = source;
  }
};

StreamOptions Options() {
  StreamOptions so;
  so.batch_size = 16;
  so.seed = 3;
  return so;
}

TEST_CASE("a stream whose network reads hang does not hold the workers", "[engine][async_fetch]") {
  Fixture f;
  EngineOptions eo;
  eo.fetch_concurrency = 8;  // more than the workers: each could take them all
  eo.fetch_queue_capacity = 16;
  auto engine = MakeEngine(2, eo);
  ReleaseAtExit release{f.source.get()};
  auto slow = engine->OpenStream(f.hanging, Options());
  REQUIRE(slow.ok());
  // The slow stream started as many reads as it may.
  REQUIRE(WaitFor([&] { return f.source->waiting() >= 8; }));

  auto fast = engine->OpenStream(f.local, Options());
  REQUIRE(fast.ok());
  std::atomic<bool> drained{false};
  testing::Collected got;
  std::thread consumer([&] {
    got = Drain(**fast);
    drained = true;
  });
  const bool finished = WaitFor([&] { return drained.load(); });
  // The hanging stream shows what it waits for.
  const StreamStats st = (*slow)->Stats();
  f.source->Release();  // (also frees a stalled engine, so the test ends)
  consumer.join();
  REQUIRE(finished);
  CHECK(got.end.ok());
  CHECK(got.indices.size() == 64);
  CHECK(st.fetches_pending == 8);
  REQUIRE(st.oldest_fetch.has_value());
  CHECK(st.oldest_fetch->object == "test-object");
  CHECK(st.oldest_fetch->host == "test-host");
  CHECK(st.oldest_fetch->bytes_received == 7);

  // Once released, the slow stream delivers every sample, correctly labelled.
  const testing::Collected slow_got = Drain(**slow);
  CHECK(slow_got.end.ok());
  REQUIRE(slow_got.indices.size() == 64);
  for (size_t i = 0; i < slow_got.indices.size(); ++i) {
    CHECK(slow_got.labels[i] ==
          f.hanging->dataset->label(static_cast<uint64_t>(slow_got.indices[i])));
  }
  CHECK(f.source->cancelled() == 0);
  CHECK((*slow)->Stats().fetches_pending == 0);
}

TEST_CASE("shutdown with network reads pending cancels them and returns", "[engine][async_fetch]") {
  Fixture f;
  auto engine = MakeEngine(2);
  ReleaseAtExit release{f.source.get()};
  auto slow = engine->OpenStream(f.hanging, Options());
  REQUIRE(slow.ok());
  REQUIRE(WaitFor([&] { return f.source->waiting() >= 1; }));
  std::atomic<bool> returned{false};
  std::thread stopper([&] {
    engine->Shutdown();
    returned = true;
  });
  const bool prompt = WaitFor([&] { return returned.load(); });
  f.source->Release();
  stopper.join();
  REQUIRE(prompt);
  CHECK(f.source->cancelled() >= 1);
  CHECK(f.source->completed() == 0);
  auto next = (*slow)->Next(absl::Seconds(20));
  REQUIRE_FALSE(next.ok());
  CHECK(next.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("cancelling a stream cancels its network reads and the stream leaves",
          "[engine][async_fetch]") {
  Fixture f;
  auto engine = MakeEngine(2);
  ReleaseAtExit release{f.source.get()};
  auto slow = engine->OpenStream(f.hanging, Options());
  REQUIRE(slow.ok());
  REQUIRE(WaitFor([&] { return f.source->waiting() >= 1; }));
  REQUIRE(engine->Stats().streams_open == 1);
  (*slow)->Cancel();
  const bool left = WaitFor([&] { return engine->Stats().streams_open == 0; });
  const int cancelled = f.source->cancelled();
  f.source->Release();
  REQUIRE(left);
  CHECK(cancelled >= 1);
  CHECK(f.source->completed() == 0);
  auto next = (*slow)->Next(absl::Seconds(20));
  REQUIRE_FALSE(next.ok());
  CHECK(next.status().code() == absl::StatusCode::kCancelled);
}

// A decode that runs until its time budget says stop (as a long video
// decode checks it between packets), at most 30 s: signals when it started.
class EndlessDecoder final : public SampleDecoder {
 public:
  explicit EndlessDecoder(std::atomic<int>* started) : started_(started) {}
  absl::Status Run(std::span<const uint8_t>, const TransformSpec&, Rng&, uint8_t*) override {
    started_->fetch_add(1);
    const AvDecodeBudget budget;  // no time limit: only a cancel spends it
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!budget.spent() && std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::DeadlineExceededError("gave up");
  }

 private:
  std::atomic<int>* const started_;
};

TEST_CASE("cancelling a stream interrupts its running decode", "[engine][cancel]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  auto p = MakePipeline(dir.path());
  std::atomic<int> started{0};
  EngineOptions eo;
  eo.decoder_factory = [&started] { return std::make_unique<EndlessDecoder>(&started); };
  auto engine = MakeEngine(1, eo);
  auto stream = engine->OpenStream(p, Options());
  REQUIRE(stream.ok());
  REQUIRE(WaitFor([&] { return started.load() >= 1; }));
  (*stream)->Cancel();
  // The stream leaves once its decode returned: at the next budget check.
  CHECK(WaitFor([&] { return engine->Stats().streams_open == 0; }, std::chrono::seconds(10)));
  CHECK(started.load() == 1);
}

}  // namespace
}  // namespace conveyor
