// Engine lifecycle tests: a stream leaves the scheduler, and its slot arena
// is freed, on every way its consumer can leave — with finite streams, which
// the engine may already have produced in full. The arena's memfd (named
// conveyor-stream-ID) shows in /proc/self/fd exactly while the arena lives.
#include <string>

#include <catch2/catch.hpp>

#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::OpenFdsMatching;
using testing::TempDir;
using testing::WaitFor;

std::string ArenaFdName(const Stream& s) {
  return "conveyor-stream-" + std::to_string(s.id()) + " (deleted)";
}

uint64_t StreamsOpen(const Engine& e) { return e.Stats().streams_open; }

// Opens a finite stream with its slots in a memfd (so the memfd can be seen).
std::unique_ptr<Stream> Open(Engine& e, const std::shared_ptr<const PipelineConfig>& p,
                             StreamOptions so) {
  so.memory = SlotMemory::kMemfd;
  auto s = e.OpenStream(p, so);
  REQUIRE(s.ok());
  REQUIRE(OpenFdsMatching(ArenaFdName(**s)) == 1);
  return std::move(*s);
}

// Takes one batch and keeps its slot.
void TakeOne(Stream& s) {
  auto b = s.Next(absl::Seconds(30));
  REQUIRE(b.ok());
  REQUIRE(b->has_value());
}

void WaitAllEmitted(Stream& s, uint64_t batches) {
  REQUIRE(WaitFor([&] { return s.Stats().batches_emitted == batches; }));
}

// Destroys the handle and checks the stream left the engine and its arena
// was unmapped and closed.
void CloseAndExpectGone(Engine& e, std::unique_ptr<Stream> s) {
  const std::string fd_name = ArenaFdName(*s);
  s.reset();
  CHECK(WaitFor([&] { return StreamsOpen(e) == 0; }));
  CHECK(WaitFor([&] { return OpenFdsMatching(fd_name) == 0; }));
}

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

TEST_CASE("a fully produced stream closed with batches still ready leaves the engine",
          "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 2;  // 4 batches
  so.num_slots = 4;   // all of them fit: the engine finishes the stream
  auto s = Open(*f.engine, f.pipeline, so);
  TakeOne(*s);  // held, never released
  WaitAllEmitted(*s, 4);
  CHECK(StreamsOpen(*f.engine) == 1);
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("a fully produced stream nobody read from leaves the engine when closed",
          "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 4;  // 2 batches
  so.num_slots = 2;
  auto s = Open(*f.engine, f.pipeline, so);
  WaitAllEmitted(*s, 2);
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("a consumer leaving in the last credits batches of an epoch frees the stream",
          "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 2;  // 4 batches per epoch
  so.num_epochs = 2;
  so.num_slots = 3;
  auto s = Open(*f.engine, f.pipeline, so);
  // Through the first epoch and into the second, releasing as we go ...
  for (int i = 0; i < 5; ++i) {
    auto b = s->Next(absl::Seconds(30));
    REQUIRE(b.ok());
    REQUIRE(b->has_value());
    REQUIRE(s->Release((*b)->slot).ok());
  }
  // ... then the last three are produced into the three credits and the
  // consumer leaves without them.
  WaitAllEmitted(*s, 8);
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("an explicit Cancel of a fully produced stream unregisters it at once",
          "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 2;
  so.num_slots = 4;
  auto s = Open(*f.engine, f.pipeline, so);
  WaitAllEmitted(*s, 4);
  s->Cancel(absl::CancelledError("consumer left"));
  CHECK(StreamsOpen(*f.engine) == 0);
  BatchInfo b;
  absl::Status why;
  CHECK(s->TryNext(&b, &why) == Stream::Poll::kError);
  CHECK(absl::IsCancelled(why));
  // The handle still owns the arena until it goes.
  CHECK(OpenFdsMatching(ArenaFdName(*s)) == 1);
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("a stream closed mid-way with slots held leaves the engine", "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 1;  // 8 batches, 2 credits: production is stopped by backpressure
  so.num_slots = 2;
  auto s = Open(*f.engine, f.pipeline, so);
  TakeOne(*s);
  TakeOne(*s);
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("a failed stream leaves the engine and frees its arena when closed",
          "[engine][lifecycle]") {
  Fixture f;
  testing::WriteFile(f.dir.Sub("class_0/aaa_broken.jpg"), {'n', 'o'});
  auto p = MakePipeline(f.dir.path());
  p->error_policy = ErrorPolicy::kFailFast;
  StreamOptions so;
  so.batch_size = 3;
  so.shuffle = false;
  so.num_slots = 3;
  auto s = Open(*f.engine, p, so);
  auto first = s->Next(absl::Seconds(30));
  CHECK(absl::IsDataLoss(first.status()));
  CHECK(WaitFor([&] { return StreamsOpen(*f.engine) == 0; }));
  CloseAndExpectGone(*f.engine, std::move(s));
}

TEST_CASE("streams outliving their engine's shutdown are freed with their handles",
          "[engine][lifecycle]") {
  Fixture f;
  StreamOptions so;
  so.batch_size = 2;
  so.num_slots = 4;
  auto s = Open(*f.engine, f.pipeline, so);
  TakeOne(*s);
  f.engine->Shutdown();
  CHECK(StreamsOpen(*f.engine) == 0);
  CloseAndExpectGone(*f.engine, std::move(s));
}

}  // namespace
}  // namespace conveyor
