// The engine's finish step (core/engine/batch_finisher.h): a finisher that
// completes batches later, on a thread of its own and out of order. The
// consumer gets batches in sequence order and only once their `done` said
// OK (the finisher rewrites each slot before it, so a batch read too early
// shows the wrong bytes); an error from `done` ends the stream with it;
// cancelling or destroying a stream with finishes in flight is harmless;
// an Attach error fails the open; a slot being finished still counts
// against the stream's credits; collate_uint8 gives uint8 host slots.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/engine/batch_finisher.h"
#include "core/engine/engine.h"
#include "core/engine/stream_plan.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Collected;
using testing::Drain;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::OpenFdsMatching;
using testing::RunOnce;
using testing::TempDir;
using testing::WaitFor;

using Done = absl::AnyInvocable<void(absl::Status) &&>;

// Completes finishes on its own thread: each completion first inverts the
// batch's image bytes (what a device copy + conversion stands for), then
// calls done. kManual completes what the test asks for (Complete); kReverse
// takes whatever is pending and completes it newest first. Drain completes
// what is left with CANCELLED and returns once every done has returned.
class ThreadFinisher final : public BatchFinisher {
 public:
  enum class Mode { kManual, kReverse };
  explicit ThreadFinisher(Mode mode, absl::Status attach_status = absl::OkStatus())
      : mode_(mode), attach_status_(std::move(attach_status)), thread_([this] { Loop(); }) {}
  ~ThreadFinisher() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  absl::Status Attach(SlotArena& arena, const BatchLayout& layout) override {
    std::lock_guard<std::mutex> l(mu_);
    ++attaches_;
    arena_ = &arena;
    layout_ = layout;
    return attach_status_;
  }

  void Finish(const BatchInfo& batch, Done done) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (drained_) ++finish_after_drain_;
      started_.push_back(batch.sequence);
      pending_.push_back(Pending{batch, std::move(done)});
    }
    cv_.notify_all();
  }

  void Drain() override {
    std::unique_lock<std::mutex> l(mu_);
    draining_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return pending_.empty() && running_ == 0; });
    drained_ = true;
  }

  // kManual: completes batch `sequence` (once its Finish came) with `status`.
  void Complete(uint64_t sequence, absl::Status status) {
    {
      std::lock_guard<std::mutex> l(mu_);
      requests_.emplace_back(sequence, std::move(status));
    }
    cv_.notify_all();
  }

  std::vector<uint64_t> started() {
    std::lock_guard<std::mutex> l(mu_);
    return started_;
  }
  size_t pending() {
    std::lock_guard<std::mutex> l(mu_);
    return pending_.size();
  }
  int attaches() {
    std::lock_guard<std::mutex> l(mu_);
    return attaches_;
  }
  SlotMemory attached_memory() {
    std::lock_guard<std::mutex> l(mu_);
    return arena_->memory();
  }
  int attached_fd() {
    std::lock_guard<std::mutex> l(mu_);
    return arena_->fd();
  }
  BatchLayout attached_layout() {
    std::lock_guard<std::mutex> l(mu_);
    return layout_;
  }
  // Dones that returned.
  int completed() {
    std::lock_guard<std::mutex> l(mu_);
    return completed_;
  }
  int finish_after_drain() {
    std::lock_guard<std::mutex> l(mu_);
    return finish_after_drain_;
  }

 private:
  struct Pending {
    BatchInfo batch;
    Done done;
  };

  // Runs with mu_ held; releases it around the work and the done.
  void Run(std::unique_lock<std::mutex>& l, Pending p, absl::Status status) {
    ++running_;
    l.unlock();
    if (status.ok()) {
      uint8_t* images = arena_->slot(p.batch.slot) + layout_.images_offset;
      const size_t bytes = static_cast<size_t>(p.batch.num_samples) * layout_.sample_bytes;
      for (size_t i = 0; i < bytes; ++i) images[i] = static_cast<uint8_t>(~images[i]);
    }
    std::move(p.done)(std::move(status));
    l.lock();
    --running_;
    ++completed_;
    cv_.notify_all();
  }

  void Loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      if (draining_ && !pending_.empty()) {
        Pending p = std::move(pending_.front());
        pending_.pop_front();
        Run(l, std::move(p), absl::CancelledError("finisher drained"));
        continue;
      }
      if (mode_ == Mode::kReverse && !pending_.empty()) {
        // Let a few more arrive, then complete them newest first.
        l.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        l.lock();
        std::deque<Pending> batch = std::move(pending_);
        pending_.clear();
        while (!batch.empty()) {
          Pending p = std::move(batch.back());
          batch.pop_back();
          Run(l, std::move(p), absl::OkStatus());
        }
        continue;
      }
      bool ran = false;
      for (size_t r = 0; r < requests_.size() && !ran; ++r) {
        auto it = std::find_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
          return p.batch.sequence == requests_[r].first;
        });
        if (it == pending_.end()) continue;
        Pending p = std::move(*it);
        pending_.erase(it);
        absl::Status st = std::move(requests_[r].second);
        requests_.erase(requests_.begin() + static_cast<std::ptrdiff_t>(r));
        Run(l, std::move(p), std::move(st));
        ran = true;
      }
      if (ran) continue;
      if (stop_) return;
      cv_.wait(l);
    }
  }

  const Mode mode_;
  const absl::Status attach_status_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<std::pair<uint64_t, absl::Status>> requests_;
  std::vector<uint64_t> started_;
  SlotArena* arena_ = nullptr;
  BatchLayout layout_;
  int attaches_ = 0;
  int running_ = 0;
  int completed_ = 0;
  int finish_after_drain_ = 0;
  bool draining_ = false;
  bool drained_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts once everything above is constructed
};

struct Fixture {
  TempDir dir;
  std::shared_ptr<PipelineConfig> pipeline;
  std::unique_ptr<Engine> engine;
  Fixture() {
    MakeImageFolder(dir.path(), 2, 4);  // 8 samples
    pipeline = MakePipeline(dir.path());
    engine = MakeEngine(2);
  }
};

StreamOptions FourBatches() {
  StreamOptions so;
  so.batch_size = 2;  // 8 samples: 4 batches
  so.num_slots = 4;
  so.seed = 7;
  return so;
}

// Takes the next batch without blocking; fails the test when there is none.
BatchInfo Take(Stream& s) {
  BatchInfo b;
  absl::Status err;
  REQUIRE(s.TryNext(&b, &err) == Stream::Poll::kBatch);
  return b;
}

Stream::Poll Poll(Stream& s, absl::Status* err = nullptr) {
  BatchInfo b;
  absl::Status e;
  const Stream::Poll p = s.TryNext(&b, &e);
  if (err != nullptr) *err = e;
  return p;
}

bool Started(ThreadFinisher& f, size_t n) {
  return WaitFor([&] { return f.started().size() >= n; });
}

TEST_CASE("finished batches reach the consumer in order, each only once its done came",
          "[engine][finisher]") {
  Fixture fx;
  const Collected plain = RunOnce(fx.pipeline, 2, FourBatches());
  REQUIRE(plain.end.ok());
  REQUIRE(plain.batches.size() == 4);

  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kManual);
  StreamOptions so = FourBatches();
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  Stream& s = **opened;
  CHECK(fin->attaches() == 1);
  REQUIRE(Started(*fin, 2));

  // Collated, handed over, not done: nothing for the consumer.
  CHECK(Poll(s) == Stream::Poll::kNotReady);
  CHECK(s.Stats().batches_emitted == 0);

  // Batch 1 done before batch 0: it waits for batch 0.
  fin->Complete(1, absl::OkStatus());
  REQUIRE(WaitFor([&] { return fin->completed() == 1; }));
  CHECK(Poll(s) == Stream::Poll::kNotReady);
  CHECK(s.Stats().batches_emitted == 0);

  fin->Complete(0, absl::OkStatus());
  REQUIRE(WaitFor([&] { return s.Stats().batches_emitted == 2; }));
  const BatchInfo b0 = Take(s);
  const BatchInfo b1 = Take(s);
  CHECK(b0.sequence == 0);
  CHECK(b1.sequence == 1);
  CHECK(Poll(s) == Stream::Poll::kNotReady);  // batches 2 and 3 are not done
  REQUIRE(s.Release(b0.slot).ok());
  REQUIRE(s.Release(b1.slot).ok());

  // The rest in reverse, while a consumer waits in Next.
  REQUIRE(Started(*fin, 4));
  std::thread completer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fin->Complete(3, absl::OkStatus());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fin->Complete(2, absl::OkStatus());
  });
  Collected rest = Drain(s);
  completer.join();
  REQUIRE(rest.end.ok());
  REQUIRE(rest.batches.size() == 2);
  CHECK(rest.batches[0].sequence == 2);
  CHECK(rest.batches[1].sequence == 3);
  // Every byte the consumer saw is the finisher's (inverted), not the
  // collated one.
  std::vector<uint8_t> inverted(plain.images.size());
  std::transform(plain.images.begin(), plain.images.end(), inverted.begin(),
                 [](uint8_t v) { return static_cast<uint8_t>(~v); });
  const size_t half = plain.images.size() / 2;
  CHECK(std::equal(rest.images.begin(), rest.images.end(), inverted.begin() + half));
  CHECK(rest.labels == std::vector<int64_t>(plain.labels.begin() + 4, plain.labels.end()));

  const StreamStats st = s.Stats();
  const StageStats& deliver = st.stages[static_cast<int>(Stage::kDeliver)];
  CHECK(deliver.items_in == 4);
  CHECK(deliver.items_out == 4);
  CHECK(deliver.in_flight == 0);
  CHECK(deliver.failures == 0);
}

TEST_CASE("a finisher completing out of order on its own thread keeps the stream's bytes",
          "[engine][finisher]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 7);  // 21 samples
  auto p = MakePipeline(dir.path());
  StreamOptions so;
  so.batch_size = 3;
  so.num_slots = 5;
  so.num_epochs = 3;
  so.seed = 11;
  const Collected plain = RunOnce(p, 3, so);
  REQUIRE(plain.end.ok());

  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kReverse);
  so.finisher = fin;
  const Collected finished = RunOnce(p, 3, so);
  REQUIRE(finished.end.ok());
  REQUIRE(finished.batches.size() == plain.batches.size());
  for (size_t i = 0; i < finished.batches.size(); ++i) {
    CHECK(finished.batches[i].sequence == i);
    CHECK(finished.batches[i].num_samples == plain.batches[i].num_samples);
  }
  REQUIRE(finished.images.size() == plain.images.size());
  bool all_inverted = true;
  for (size_t i = 0; i < plain.images.size(); ++i) {
    all_inverted = all_inverted && finished.images[i] == static_cast<uint8_t>(~plain.images[i]);
  }
  CHECK(all_inverted);
  CHECK(finished.indices == plain.indices);
  CHECK(fin->finish_after_drain() == 0);
}

TEST_CASE("an error from done ends the stream with it, after the batches before it",
          "[engine][finisher][errors]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kManual);
  StreamOptions so = FourBatches();
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  Stream& s = **opened;
  REQUIRE(Started(*fin, 2));

  // Batch 1 fails while batch 0 is still in flight: the error waits its turn.
  fin->Complete(1, absl::DataLossError("copy to the device failed"));
  REQUIRE(WaitFor([&] { return fin->completed() == 1; }));
  CHECK(Poll(s) == Stream::Poll::kNotReady);

  fin->Complete(0, absl::OkStatus());
  REQUIRE(WaitFor([&] { return s.Stats().batches_emitted == 1; }));
  const BatchInfo b0 = Take(s);
  CHECK(b0.sequence == 0);
  absl::Status err;
  REQUIRE(WaitFor([&] { return Poll(s, &err) == Stream::Poll::kError; }));
  CHECK(absl::IsDataLoss(err));
  CHECK(err.message() == "copy to the device failed");
  auto next = s.Next(absl::Seconds(5));
  CHECK(absl::IsDataLoss(next.status()));

  // The failed stream leaves the scheduler although its handle lives and
  // later finishes are still in flight.
  CHECK(WaitFor([&] { return fx.engine->Stats().streams_open == 0; }));
  const StageStats deliver = fx.engine->Stats().stages[static_cast<int>(Stage::kDeliver)];
  CHECK(deliver.failures == 1);
  CHECK(deliver.failures_by_code[static_cast<size_t>(absl::StatusCode::kDataLoss)] == 1);

  // Finishes completing after the failure are dropped.
  for (uint64_t seq : fin->started()) {
    if (seq >= 2) fin->Complete(seq, absl::OkStatus());
  }
  CHECK(WaitFor([&] { return fin->pending() == 0; }));
  CHECK(Poll(s) == Stream::Poll::kError);
  REQUIRE(s.Release(b0.slot).ok());
}

TEST_CASE("dones arriving after a cancel are harmless", "[engine][finisher][cancel]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kManual);
  StreamOptions so = FourBatches();
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  Stream& s = **opened;
  REQUIRE(Started(*fin, 2));
  s.Cancel(absl::CancelledError("client went away"));
  absl::Status err;
  CHECK(Poll(s, &err) == Stream::Poll::kError);
  CHECK(absl::IsCancelled(err));
  // Every batch handed over completes OK after the cancel: none is delivered.
  for (uint64_t seq = 0; seq < 4; ++seq) fin->Complete(seq, absl::OkStatus());
  CHECK(WaitFor([&] { return fin->pending() == 0 && fin->started().size() >= 2; }));
  CHECK(Poll(s, &err) == Stream::Poll::kError);
  CHECK(s.Stats().batches_emitted == 0);
  CHECK(WaitFor([&] { return fx.engine->Stats().streams_open == 0; }));
}

TEST_CASE("destroying streams with finishes in flight drains the finisher first",
          "[engine][finisher][lifecycle]") {
  Fixture fx;
  for (int round = 0; round < 20; ++round) {
    auto fin = std::make_shared<ThreadFinisher>(round % 2 == 0 ? ThreadFinisher::Mode::kManual
                                                               : ThreadFinisher::Mode::kReverse);
    StreamOptions so = FourBatches();
    so.num_epochs = 0;  // endless: the workers are busy while the handle goes
    so.memory = SlotMemory::kPinnedMemfd;
    so.finisher = fin;
    auto opened = fx.engine->OpenStream(fx.pipeline, so);
    REQUIRE(opened.ok());
    const std::string fd_name = "conveyor-stream-" + std::to_string((*opened)->id()) + " (deleted)";
    if (round % 2 == 0) {
      REQUIRE(Started(*fin, 1));
    } else {
      // Take and release a few while the finisher completes in reverse.
      for (int i = 0; i < round % 5; ++i) {
        auto b = (*opened)->Next(absl::Seconds(30));
        REQUIRE(b.ok());
        REQUIRE(b->has_value());
        REQUIRE((*opened)->Release((*b)->slot).ok());
      }
    }
    opened->reset();  // Drain ran: no finish pending, none started after
    CHECK(fin->pending() == 0);
    CHECK(fin->finish_after_drain() == 0);
    CHECK(WaitFor([&] { return fx.engine->Stats().streams_open == 0; }));
    CHECK(WaitFor([&] { return OpenFdsMatching(fd_name) == 0; }));
  }
}

TEST_CASE("an engine shut down with finishes in flight fails the stream and drains at close",
          "[engine][finisher][lifecycle]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kManual);
  StreamOptions so = FourBatches();
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  REQUIRE(Started(*fin, 1));
  fx.engine.reset();  // shuts down: the stream fails with UNAVAILABLE
  absl::Status err;
  CHECK(Poll(**opened, &err) == Stream::Poll::kError);
  CHECK(absl::IsUnavailable(err));
  fin->Complete(0, absl::OkStatus());  // after the engine is gone
  CHECK(WaitFor([&] { return fin->completed() == 1; }));
  opened->reset();
  CHECK(fin->pending() == 0);
}

TEST_CASE("an Attach error fails the open with it and leaves nothing behind",
          "[engine][finisher][errors]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(
      ThreadFinisher::Mode::kManual,
      absl::FailedPreconditionError("no CUDA device: the driver is not loaded"));
  StreamOptions so = FourBatches();
  so.memory = SlotMemory::kDevice;
  so.finisher = fin;
  const int memfds = OpenFdsMatching("conveyor-stream-");
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(!opened.ok());
  CHECK(absl::IsFailedPrecondition(opened.status()));
  CHECK(opened.status().message() == "no CUDA device: the driver is not loaded");
  CHECK(fin->attaches() == 1);
  CHECK(fin->started().empty());
  CHECK(fx.engine->Stats().streams_open == 0);
  CHECK(OpenFdsMatching("conveyor-stream-") == memfds);  // the arena was freed
  // The engine goes on serving.
  so.finisher = nullptr;
  CHECK(fx.engine->OpenStream(fx.pipeline, so).ok());
}

TEST_CASE("Attach gets the stream's arena of its memory kind and its layout",
          "[engine][finisher]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kReverse);
  StreamOptions so = FourBatches();
  so.memory = SlotMemory::kPinnedMemfd;
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  CHECK(fin->attached_memory() == SlotMemory::kPinnedMemfd);
  CHECK(fin->attached_fd() == (*opened)->arena().fd());
  CHECK(fin->attached_fd() >= 0);
  CHECK(fin->attached_layout().slot_bytes == (*opened)->layout().slot_bytes);
  CHECK(fin->attached_layout().sample_bytes == (*opened)->layout().sample_bytes);
  CHECK(Drain(**opened).end.ok());
}

TEST_CASE("a slot being finished still counts against the stream's credits",
          "[engine][finisher][backpressure]") {
  Fixture fx;
  auto fin = std::make_shared<ThreadFinisher>(ThreadFinisher::Mode::kManual);
  StreamOptions so = FourBatches();
  so.num_slots = 2;
  so.finisher = fin;
  auto opened = fx.engine->OpenStream(fx.pipeline, so);
  REQUIRE(opened.ok());
  Stream& s = **opened;
  REQUIRE(Started(*fin, 2));
  // Both slots are with the finisher: no third batch starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(fin->started() == std::vector<uint64_t>{0, 1});
  const StageStats deliver = s.Stats().stages[static_cast<int>(Stage::kDeliver)];
  CHECK(deliver.in_flight == 2);
  CHECK(deliver.queue_size == 0);
  fin->Complete(0, absl::OkStatus());
  fin->Complete(1, absl::OkStatus());
  REQUIRE(WaitFor([&] { return s.Stats().batches_emitted == 2; }));
  // Ready but held by nobody yet: still no slot free.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(fin->started().size() == 2);
  const BatchInfo b0 = Take(s);
  REQUIRE(s.Release(b0.slot).ok());
  REQUIRE(Started(*fin, 3));
  CHECK(fin->started().size() == 3);
}

TEST_CASE("collate_uint8 gives uint8 host slots for a float32 pipeline",
          "[engine][finisher][plan]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 3);  // 6 samples
  auto u8 = MakePipeline(dir.path(), 16);
  auto f32 = std::make_shared<PipelineConfig>(*u8);
  f32->transform.dtype = DType::kFloat32;
  REQUIRE(ValidatePipelineConfig(*f32).ok());

  StreamOptions so;
  so.batch_size = 3;
  so.seed = 5;
  auto as_float = PlanStream(*f32, so);
  REQUIRE(as_float.ok());
  so.collate_uint8 = true;
  auto as_u8 = PlanStream(*f32, so);
  REQUIRE(as_u8.ok());
  CHECK(as_float->layout.sample_bytes == 3u * 16 * 16 * 4);
  CHECK(as_u8->layout.sample_bytes == 3u * 16 * 16);
  CHECK(as_u8->transform.dtype == DType::kUint8);
  CHECK(as_float->transform.dtype == DType::kFloat32);
  CHECK(as_u8->arena_bytes <= as_float->arena_bytes);

  // The decoders wrote uint8: byte for byte what a uint8 pipeline gives.
  so.collate_uint8 = false;
  const Collected plain = RunOnce(u8, 2, so);
  REQUIRE(plain.end.ok());
  so.collate_uint8 = true;
  const Collected collated = RunOnce(f32, 2, so);
  REQUIRE(collated.end.ok());
  CHECK(collated.images == plain.images);
  CHECK(collated.indices == plain.indices);

  // Nothing to skip for an audio pipeline (float32 only): refused, named.
  PipelineConfig audio = *f32;
  audio.transform.kind = MediaKind::kAudio;
  auto refused = PlanStream(audio, so);
  REQUIRE(!refused.ok());
  CHECK(absl::IsInvalidArgument(refused.status()));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("collate_uint8"));
}

}  // namespace
}  // namespace conveyor
