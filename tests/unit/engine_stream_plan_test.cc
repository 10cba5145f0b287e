// PlanStream (core/engine/stream_plan.h): a stream's geometry computed once.
// What must hold: the plan's figures for ordinary streams, short last
// batches and drop_last, resume positions at epoch boundaries and mid-epoch;
// every overflow is refused with OutOfRange naming the field; and the
// engine delivers exactly what the plan says (batches per epoch, samples
// per epoch, total batches), so the service, which tells clients the plan's
// figures, cannot disagree with it.
#include <unistd.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/engine/engine.h"
#include "core/engine/slot_arena.h"
#include "core/engine/stream_plan.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Collected;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::RunOnce;
using testing::TempDir;

constexpr uint64_t kU64 = ~uint64_t{0};

StreamOptions Options(uint32_t batch_size, uint64_t num_epochs, uint32_t rank = 0,
                      uint32_t world_size = 1, bool drop_last = false) {
  StreamOptions o;
  o.batch_size = batch_size;
  o.num_epochs = num_epochs;
  o.rank = rank;
  o.world_size = world_size;
  o.drop_last = drop_last;
  o.shuffle = false;
  o.seed = 3;
  return o;
}

StreamPlan Planned(const PipelineConfig& p, const StreamOptions& o,
                   std::optional<ResumePosition> resume = std::nullopt) {
  absl::StatusOr<StreamPlan> plan = PlanStream(p, o, resume);
  INFO(plan.status());
  REQUIRE(plan.ok());
  return *std::move(plan);
}

// The request is refused with `code` and a message naming `field`.
void Refused(const PipelineConfig& p, const StreamOptions& o, absl::StatusCode code,
             const std::string& field, std::optional<ResumePosition> resume = std::nullopt) {
  const absl::Status s = PlanStream(p, o, resume).status();
  INFO(s);
  CHECK(s.code() == code);
  CHECK(std::string(s.message()).find(field) != std::string::npos);
}

TEST_CASE("stream plan: layout, slot and arena bytes, samples and batches of a plain stream",
          "[engine][plan]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 6);  // 12 samples
  auto p = MakePipeline(dir.path());
  StreamOptions o = Options(4, 3);
  o.num_slots = 5;
  const StreamPlan plan = Planned(*p, o);
  const BatchLayout want = BatchLayout::For(p->transform, 4);
  CHECK(plan.layout.slot_bytes == want.slot_bytes);
  CHECK(plan.layout.sample_bytes == want.sample_bytes);
  CHECK(plan.layout.batch_size == 4);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  CHECK(plan.slot_bytes % page == 0);
  CHECK(plan.slot_bytes >= want.slot_bytes);
  CHECK(plan.slot_bytes < want.slot_bytes + page);
  CHECK(plan.arena_bytes == 5 * plan.slot_bytes);
  CHECK(plan.arena_bytes == SlotArena::MappedBytes(5, want.slot_bytes));
  CHECK(plan.samples_per_epoch == 12);
  CHECK(plan.batches_per_epoch == 3);
  CHECK(plan.first_epoch_samples == 12);
  CHECK(plan.first_epoch_batches == 3);
  CHECK(plan.total_batches == 9);
  CHECK(plan.options.first_epoch == 0);
  CHECK(plan.options.num_epochs == 3);
  CHECK(plan.options.epoch_offset == 0);

  o.num_epochs = 0;  // endless
  CHECK(Planned(*p, o).total_batches == 0);
  CHECK(Planned(*p, o).batches_per_epoch == 3);
}

TEST_CASE("stream plan: short last batches, world sizes that do not divide the dataset, drop_last",
          "[engine][plan]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);  // 10 samples
  auto p = MakePipeline(dir.path());
  struct Case {
    uint32_t batch, rank, world;
    bool drop_last;
    uint64_t samples, batches;
  };
  for (const Case& c : std::vector<Case>{
           {4, 0, 1, false, 10, 3},  // 4 + 4 + 2
           {5, 0, 1, false, 10, 2},  // divides: no short batch
           {2, 2, 3, false, 4, 2},   // ceil(10 / 3): padded by wrapping
           {2, 2, 3, true, 3, 2},    // floor(10 / 3): 2 + 1
           {3, 0, 4, true, 2, 1},    // a batch larger than the epoch
           {1, 9, 10, true, 1, 1},
       }) {
    INFO("batch " << c.batch << " rank " << c.rank << "/" << c.world << " drop_last "
                  << c.drop_last);
    const StreamPlan plan = Planned(*p, Options(c.batch, 2, c.rank, c.world, c.drop_last));
    CHECK(plan.samples_per_epoch == c.samples);
    CHECK(plan.batches_per_epoch == c.batches);
    CHECK(plan.total_batches == 2 * c.batches);
  }
  // drop_last with more ranks than samples leaves every rank without any.
  Refused(*p, Options(1, 1, 0, 11, true), absl::StatusCode::kInvalidArgument, "drop_last");
}

TEST_CASE(
    "stream plan: a resume position at an epoch boundary or mid-epoch moves the start and "
    "keeps the end",
    "[engine][plan][resume]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 6);  // 12 samples
  auto p = MakePipeline(dir.path());
  StreamOptions o = Options(4, 3);  // epochs 2, 3, 4 of 3 batches
  o.first_epoch = 2;

  SECTION("at the start of a later epoch") {
    const StreamPlan plan = Planned(*p, o, ResumePosition{3, 0});
    CHECK(plan.options.first_epoch == 3);
    CHECK(plan.options.num_epochs == 2);
    CHECK(plan.options.epoch_offset == 0);
    CHECK(plan.first_epoch_samples == 12);
    CHECK(plan.total_batches == 6);
  }
  SECTION("at the start of the first epoch: the same as no resume") {
    const StreamPlan plan = Planned(*p, o, ResumePosition{2, 0});
    const StreamPlan fresh = Planned(*p, o);
    CHECK(plan.options.first_epoch == fresh.options.first_epoch);
    CHECK(plan.options.num_epochs == fresh.options.num_epochs);
    CHECK(plan.total_batches == fresh.total_batches);
  }
  SECTION("mid-epoch: the rest of that epoch, then whole epochs") {
    const StreamPlan plan = Planned(*p, o, ResumePosition{3, 6});
    CHECK(plan.options.first_epoch == 3);
    CHECK(plan.options.num_epochs == 2);
    CHECK(plan.options.epoch_offset == 6);
    CHECK(plan.first_epoch_samples == 6);
    CHECK(plan.first_epoch_batches == 2);
    CHECK(plan.samples_per_epoch == 12);
    CHECK(plan.total_batches == 2 + 3);
  }
  SECTION("mid-epoch at another world size: the rest dealt over the new ranks") {
    StreamOptions two = o;
    two.rank = 1;
    two.world_size = 2;
    const StreamPlan plan = Planned(*p, two, ResumePosition{4, 7});
    CHECK(plan.options.num_epochs == 1);
    CHECK(plan.first_epoch_samples == 3);  // ceil(5 / 2)
    CHECK(plan.first_epoch_batches == 1);
    CHECK(plan.total_batches == 1);
  }
  SECTION("the last sample of the last epoch") {
    const StreamPlan plan = Planned(*p, o, ResumePosition{4, 11});
    CHECK(plan.first_epoch_samples == 1);
    CHECK(plan.total_batches == 1);
  }
  SECTION("an endless stream resumes endless") {
    StreamOptions endless = o;
    endless.num_epochs = 0;
    const StreamPlan plan = Planned(*p, endless, ResumePosition{40, 5});
    CHECK(plan.options.first_epoch == 40);
    CHECK(plan.options.num_epochs == 0);
    CHECK(plan.options.epoch_offset == 5);
    CHECK(plan.total_batches == 0);
    Refused(*p, endless, absl::StatusCode::kOutOfRange, "resume epoch 1", ResumePosition{1, 0});
    Refused(*p, endless, absl::StatusCode::kOutOfRange, "first_epoch",
            ResumePosition{uint64_t{1} << 63, 0});
  }
  SECTION("positions outside the stream are refused naming them") {
    Refused(*p, o, absl::StatusCode::kOutOfRange, "resume epoch 5", ResumePosition{5, 0});
    Refused(*p, o, absl::StatusCode::kOutOfRange, "resume epoch 1", ResumePosition{1, 0});
    // The end of an epoch is the start of the next: offset 12 is past it.
    Refused(*p, o, absl::StatusCode::kOutOfRange, "resume offset 12", ResumePosition{3, 12});
    Refused(*p, o, absl::StatusCode::kOutOfRange, "resume offset", ResumePosition{3, kU64});
  }
}

TEST_CASE("stream plan: every overflow is OutOfRange naming the field that overflows",
          "[engine][plan][validate]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);  // 4 samples
  auto p = MakePipeline(dir.path());
  StreamOptions o = Options(1, 1);  // 4 batches an epoch

  // The exclusive end of the epochs must be a number.
  o.first_epoch = kU64;
  Refused(*p, o, absl::StatusCode::kOutOfRange, "first_epoch");
  o.first_epoch = kU64 - 1;
  CHECK(PlanStream(*p, o).ok());  // epoch 2^64 - 2, ending before 2^64 - 1
  o.first_epoch = 2;
  o.num_epochs = kU64 - 1;
  Refused(*p, o, absl::StatusCode::kOutOfRange, "num_epochs");
  // Endless streams start below 2^63.
  o.num_epochs = 0;
  o.first_epoch = uint64_t{1} << 63;
  Refused(*p, o, absl::StatusCode::kOutOfRange, "first_epoch");
  o.first_epoch = (uint64_t{1} << 63) - 1;
  CHECK(PlanStream(*p, o).ok());

  // The total batch count: 4 × num_epochs must fit.
  o.first_epoch = 0;
  o.num_epochs = uint64_t{1} << 62;  // 2^64 batches
  Refused(*p, o, absl::StatusCode::kOutOfRange, "num_epochs");
  o.num_epochs = (uint64_t{1} << 62) - 1;
  CHECK(Planned(*p, o).total_batches == kU64 - 3);
  // ... with a short first epoch (resumed mid-epoch): 3 + 4 × (n - 1).
  o.num_epochs = uint64_t{1} << 62;
  CHECK(Planned(*p, o, ResumePosition{0, 1}).total_batches == kU64);
  Refused(*p, o, absl::StatusCode::kOutOfRange, "num_epochs", ResumePosition{0, 0});

  // The arena: credits × the slot's mapped bytes. A slot of 8 × 8192² × 3
  // float32 values is 6 GiB; 2^32 - 1 of them do not fit 64 bits.
  auto big = std::make_shared<PipelineConfig>(*p);
  big->transform.output_height = big->transform.output_width = 8192;
  big->transform.dtype = DType::kFloat32;
  StreamOptions arena = Options(8, 1);
  arena.num_slots = ~uint32_t{0};
  Refused(*big, arena, absl::StatusCode::kOutOfRange, "credits (num_slots)");
  arena.num_slots = 64;
  CHECK(Planned(*big, arena).arena_bytes == 64 * Planned(*big, arena).slot_bytes);
}

TEST_CASE("stream plan: fields out of their range are InvalidArgument naming them",
          "[engine][plan][validate]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  auto p = MakePipeline(dir.path());
  p->max_batch_size = 16;
  Refused(*p, Options(0, 1), absl::StatusCode::kInvalidArgument, "batch_size");
  Refused(*p, Options(17, 1), absl::StatusCode::kInvalidArgument, "max_batch_size");
  StreamOptions no_slots = Options(2, 1);
  no_slots.num_slots = 0;
  Refused(*p, no_slots, absl::StatusCode::kInvalidArgument, "num_slots");
  Refused(*p, Options(2, 1, 3, 3), absl::StatusCode::kInvalidArgument, "rank");
  Refused(*p, Options(2, 1, 0, 0), absl::StatusCode::kInvalidArgument, "world_size");
}

// Batches and samples of each epoch as the engine delivered them.
struct Delivered {
  std::map<uint64_t, uint64_t> batches, samples;
  uint64_t total = 0;
};

Delivered Count(const Collected& c) {
  Delivered d;
  for (const BatchInfo& b : c.batches) {
    ++d.batches[b.epoch];
    d.samples[b.epoch] += b.num_samples;
    ++d.total;
  }
  return d;
}

TEST_CASE("stream plan: the engine delivers what the plan says, fresh and resumed",
          "[engine][plan][resume]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);  // 10 samples
  auto p = MakePipeline(dir.path());
  struct Case {
    uint32_t batch, rank, world;
    bool drop_last;
    std::optional<ResumePosition> resume;
  };
  for (const Case& c : std::vector<Case>{
           {4, 0, 1, false, std::nullopt},
           {3, 1, 3, false, std::nullopt},
           {3, 2, 3, true, std::nullopt},
           {4, 0, 1, false, ResumePosition{1, 0}},
           {4, 0, 1, false, ResumePosition{1, 3}},
           {2, 1, 2, true, ResumePosition{2, 5}},
           {4, 0, 1, false, ResumePosition{3, 9}},
       }) {
    INFO("batch " << c.batch << " rank " << c.rank << "/" << c.world << " drop_last " << c.drop_last
                  << " resume "
                  << (c.resume
                          ? std::to_string(c.resume->epoch) + ":" + std::to_string(c.resume->offset)
                          : "none"));
    StreamOptions o = Options(c.batch, 3, c.rank, c.world, c.drop_last);
    o.first_epoch = 1;  // epochs 1, 2, 3
    const StreamPlan plan = Planned(*p, o, c.resume);
    auto engine = MakeEngine(2);
    auto stream = engine->OpenStream(p, plan);
    REQUIRE(stream.ok());
    CHECK((*stream)->samples_per_epoch() == plan.samples_per_epoch);
    CHECK((*stream)->plan().total_batches == plan.total_batches);
    const Collected got = testing::Drain(**stream);
    REQUIRE(got.end.ok());
    const Delivered d = Count(got);
    CHECK(d.total == plan.total_batches);
    REQUIRE(d.batches.size() == plan.options.num_epochs);
    for (const auto& [epoch, batches] : d.batches) {
      INFO("epoch " << epoch);
      const bool first = epoch == plan.options.first_epoch;
      CHECK(batches == (first ? plan.first_epoch_batches : plan.batches_per_epoch));
      CHECK(d.samples.at(epoch) == (first ? plan.first_epoch_samples : plan.samples_per_epoch));
    }
    // Opening from the options alone plans the same stream.
    if (!c.resume.has_value()) {
      CHECK(Count(RunOnce(p, 2, o)).total == plan.total_batches);
    }
  }
}

TEST_CASE("stream plan: max_batches ends the stream early, never late", "[engine][plan]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);  // 10 samples: 3 batches of 4 per epoch
  auto p = MakePipeline(dir.path());
  StreamOptions o = Options(4, 2);
  o.max_batches = 4;
  CHECK(Planned(*p, o).total_batches == 4);
  o.max_batches = 100;  // past the stream's own end: no effect
  CHECK(Planned(*p, o).total_batches == 6);
  o.num_epochs = 0;  // endless: the cap is the end
  o.max_batches = 7;
  CHECK(Planned(*p, o).total_batches == 7);
  o.num_epochs = 1;
  o.max_batches = 1;  // with a resume, the cap counts from the resume point
  const StreamPlan resumed = Planned(*p, o, ResumePosition{0, 4});
  CHECK(resumed.first_epoch_batches == 2);
  CHECK(resumed.total_batches == 1);
}

TEST_CASE("stream plan: any range of a rank's batches, byte for byte as in the whole epoch",
          "[engine][plan][resume]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 9);  // 27 samples
  auto p = MakePipeline(dir.path());
  for (const uint32_t world : {1u, 2u}) {
    for (const bool drop_last : {false, true}) {
      StreamOptions o = Options(3, 1, world - 1, world, drop_last);
      o.shuffle = true;
      const Collected whole = RunOnce(p, 2, o);
      REQUIRE(whole.end.ok());
      const size_t sample_bytes = whole.images.size() / whole.labels.size();
      const uint64_t n = whole.batches.size();
      // Ranges [k, k + len) cover the epoch; each is a stream resumed at its
      // first batch's offset and capped at its length.
      for (const uint64_t len : {uint64_t{1}, uint64_t{2}, uint64_t{4}}) {
        std::vector<uint8_t> images;
        std::vector<int64_t> indices;
        for (uint64_t k = 0; k < n; k += len) {
          INFO("world " << world << " drop_last " << drop_last << " range " << k << "+" << len);
          StreamOptions r = o;
          r.max_batches = len;
          const StreamPlan plan = Planned(*p, r, ResumePosition{0, k * 3 * world});
          auto engine = MakeEngine(2);
          auto stream = engine->OpenStream(p, plan);
          REQUIRE(stream.ok());
          const Collected got = testing::Drain(**stream);
          REQUIRE(got.end.ok());
          CHECK(got.batches.size() == std::min(len, n - k));
          CHECK(got.batches.back().offset == whole.batches[k + got.batches.size() - 1].offset);
          images.insert(images.end(), got.images.begin(), got.images.end());
          indices.insert(indices.end(), got.indices.begin(), got.indices.end());
        }
        CHECK(indices == whole.indices);
        CHECK(images.size() == whole.labels.size() * sample_bytes);
        CHECK(images == whole.images);
      }
    }
  }
}

}  // namespace
}  // namespace conveyor
