// Faults of the file reader, through the real engine over real files: a
// FaultInjectingReader (tests/support/fault_injecting_reader.h), given to the
// engine as its file reader, makes chosen reads of the real FileSampleSource
// fail with an errno, return short counts, end early or
// take long; files are deleted for real. What must hold: errors of the
// system are retried and the samples delivered as in a clean run; when they
// persist the stream ends with UNAVAILABLE naming the file; errors of the
// file are the sample's (error_policy); and every sample of every epoch is
// delivered exactly once or reported failed exactly once.
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/data/file_reader.h"
#include "core/engine/engine.h"
#include "tests/support/fault_injecting_reader.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Collected;
using testing::Drain;
using testing::Errno;
using testing::FaultInjectingReader;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::ReadFault;
using testing::RunOnce;
using testing::TempDir;

EngineOptions FastRetries(uint32_t attempts = 8) {
  EngineOptions o;
  o.fetch_retry_max_attempts = attempts;
  o.fetch_retry_initial_backoff = absl::Microseconds(200);
  o.fetch_retry_max_backoff = absl::Milliseconds(2);
  o.fetch_retry_deadline = absl::Seconds(60);
  return o;
}

// `o` with the engine's files read through `reader`.
EngineOptions Through(std::shared_ptr<const FileReader> reader, EngineOptions o = EngineOptions()) {
  o.file_reader = std::move(reader);
  return o;
}

StreamOptions Epochs(uint64_t n, uint32_t batch_size = 4) {
  StreamOptions so;
  so.batch_size = batch_size;
  so.seed = 7;
  so.num_epochs = n;
  return so;
}

void CheckSameAsClean(const Collected& got, const Collected& want) {
  REQUIRE(got.end.ok());
  CHECK(got.indices == want.indices);
  CHECK(got.labels == want.labels);
  CHECK(got.images == want.images);
  REQUIRE(got.batches.size() == want.batches.size());
  for (const BatchInfo& b : got.batches) CHECK(b.failures.empty());
}

TEST_CASE(
    "read faults: transient EIO, ENOMEM, EMFILE and EAGAIN of the reader are retried and "
    "every sample is delivered as in a clean run",
    "[read_faults][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 7);
  auto p = MakePipeline(dir.path());
  p->max_failure_rate = 1.0;  // a skipped sample would not end the stream: it must not happen
  const Collected want = RunOnce(p, 2, Epochs(2), FastRetries());
  REQUIRE(want.end.ok());

  auto faults = std::make_shared<FaultInjectingReader>();
  const std::vector<std::pair<int, int>> plan = {{EIO, 2}, {ENOMEM, 3}, {EMFILE, 1}, {EAGAIN, 2}};
  int planned = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    // Every epoch reads each file once: two epochs take 2 × times faults.
    faults->Plan("/" + std::string(p->dataset->relative_path(i * 5)), Errno(plan[i].first),
                 2 * plan[i].second);
    planned += 2 * plan[i].second;
  }
  const Collected got = RunOnce(p, 2, Epochs(2), Through(faults, FastRetries()));
  CheckSameAsClean(got, want);
  CHECK(faults->injected() == planned);
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string rel(p->dataset->relative_path(i * 5));
    CHECK(faults->reads_of("/" + rel) == 2 * plan[i].second + 2);
  }
}

TEST_CASE("read faults: short counts and an interrupted read deliver the same bytes",
          "[read_faults]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);
  auto p = MakePipeline(dir.path());
  const Collected want = RunOnce(p, 2, Epochs(1));
  REQUIRE(want.end.ok());

  auto faults = std::make_shared<FaultInjectingReader>();
  ReadFault short_counts;
  short_counts.max_bytes_per_call = 13;
  faults->PlanAll(short_counts);
  ReadFault interrupted = Errno(EINTR);  // the first pread fails with EINTR, then short counts
  interrupted.max_bytes_per_call = 13;
  faults->Plan("/" + std::string(p->dataset->relative_path(3)), interrupted);
  CheckSameAsClean(RunOnce(p, 2, Epochs(1), Through(faults)), want);
  CHECK(faults->injected() == 1);

  // The reader itself: the bytes equal the file's.
  const std::filesystem::path file = dir.Sub(std::string(p->dataset->relative_path(3)));
  std::vector<uint8_t> via_faults, direct;
  REQUIRE(ReadWholeFile(file.string(), 1 << 20, &via_faults, *faults).ok());
  CHECK(faults->injected() == 2);
  REQUIRE(ReadWholeFile(file.string(), 1 << 20, &direct).ok());
  CHECK(via_faults.size() == std::filesystem::file_size(file));
  CHECK(via_faults == direct);
}

TEST_CASE("read faults: slow reads reorder nothing and lose nothing", "[read_faults]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 6);
  auto p = MakePipeline(dir.path());
  const Collected want = RunOnce(p, 2, Epochs(2, 5));
  REQUIRE(want.end.ok());

  auto faults = std::make_shared<FaultInjectingReader>();
  ReadFault slow;
  slow.delay = absl::Milliseconds(40);
  for (uint64_t i : {0, 4, 9, 17}) {
    faults->Plan("/" + std::string(p->dataset->relative_path(i)), slow);
  }
  CheckSameAsClean(RunOnce(p, 2, Epochs(2, 5), Through(faults)), want);
  CHECK(faults->injected() == 8);
}

TEST_CASE("read faults: a persistent EIO ends the stream with UNAVAILABLE naming the file",
          "[read_faults][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 6);
  auto p = MakePipeline(dir.path());
  p->error_policy = ErrorPolicy::kSkip;
  p->max_failure_rate = 1.0;
  const uint64_t victim = 6;  // batch 1 without shuffle
  const std::string rel(p->dataset->relative_path(victim));
  auto faults = std::make_shared<FaultInjectingReader>();
  faults->Plan("/" + rel, Errno(EIO));
  StreamOptions so = Epochs(1);
  so.shuffle = false;
  const Collected c = RunOnce(p, 2, so, Through(faults, FastRetries(4)));
  REQUIRE(absl::IsUnavailable(c.end));
  const std::string msg(c.end.message());
  CHECK(msg.find(rel) != std::string::npos);
  CHECK(msg.find("EIO") != std::string::npos);
  CHECK(msg.find("4 attempt") != std::string::npos);
  CHECK(faults->reads_of("/" + rel) == 4);
  for (const BatchInfo& b : c.batches) {  // what came is whole: no silent gap
    CHECK(b.failures.empty());
    CHECK(b.num_samples == 4);
    CHECK(b.batch_in_epoch == 0);
  }
}

TEST_CASE("read faults: a file that shrinks while it is read is a failure of the sample saying so",
          "[read_faults]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);
  auto p = MakePipeline(dir.path());
  p->max_failure_rate = 1.0;
  const std::string rel(p->dataset->relative_path(2));
  const uint64_t size = std::filesystem::file_size(dir.Sub(rel));
  auto faults = std::make_shared<FaultInjectingReader>();
  ReadFault truncated;
  truncated.end_after_bytes = static_cast<int64_t>(size / 2);
  faults->Plan("/" + rel, truncated);
  StreamOptions so = Epochs(1, 5);
  so.shuffle = false;
  const Collected c = RunOnce(p, 2, so, Through(faults, FastRetries()));
  REQUIRE(c.end.ok());
  REQUIRE(c.batches.size() == 2);
  REQUIRE(c.batches[0].failures.size() == 1);
  CHECK(c.batches[0].num_samples == 4);
  const SampleFailure& f = c.batches[0].failures[0];
  CHECK(f.path == rel);
  CHECK(f.sample_index == 2);
  INFO(f.reason);
  CHECK(f.reason.find("changed size while being read") != std::string::npos);
  CHECK(f.reason.find(std::to_string(size / 2) + " of " + std::to_string(size)) !=
        std::string::npos);
  CHECK(faults->reads_of("/" + rel) == 1);  // an error of the file: not retried
}

// Delivered and failed indices of each epoch.
struct EpochAccount {
  std::multiset<int64_t> delivered;
  std::multiset<uint64_t> failed;
  std::map<uint64_t, std::string> reasons;
};

std::map<uint64_t, EpochAccount> Account(const Collected& c) {
  std::map<uint64_t, EpochAccount> out;
  size_t at = 0;
  for (const BatchInfo& b : c.batches) {
    EpochAccount& a = out[b.epoch];
    for (uint32_t i = 0; i < b.num_samples; ++i) a.delivered.insert(c.indices[at + i]);
    at += b.num_samples;
    for (const SampleFailure& f : b.failures) {
      a.failed.insert(f.sample_index);
      a.reasons[f.sample_index] = f.reason;
    }
  }
  return out;
}

TEST_CASE(
    "read faults: under mixed faults every sample of every epoch is delivered exactly once "
    "or reported failed exactly once",
    "[read_faults][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 7);  // 21 samples: batches of 4 leave a short last one
  auto p = MakePipeline(dir.path());
  p->max_failure_rate = 1.0;
  const uint64_t n = p->dataset->size();
  const uint64_t deleted = 8, shrinking = 15;
  std::filesystem::remove(dir.Sub(std::string(p->dataset->relative_path(deleted))));

  auto faults = std::make_shared<FaultInjectingReader>();
  ReadFault short_counts;
  short_counts.max_bytes_per_call = 100;
  faults->PlanAll(short_counts);
  ReadFault half;
  half.end_after_bytes = 200;
  faults->Plan("/" + std::string(p->dataset->relative_path(shrinking)), half);
  faults->Plan("/" + std::string(p->dataset->relative_path(1)), Errno(EIO), 3);
  faults->Plan("/" + std::string(p->dataset->relative_path(2)), Errno(ENOMEM), 2);
  faults->Plan("/" + std::string(p->dataset->relative_path(12)), Errno(EMFILE), 4);
  ReadFault slow;
  slow.delay = absl::Milliseconds(20);
  faults->Plan("/" + std::string(p->dataset->relative_path(20)), slow);

  const Collected c = RunOnce(p, 3, Epochs(3), Through(faults, FastRetries()));
  REQUIRE(c.end.ok());
  const auto epochs = Account(c);
  REQUIRE(epochs.size() == 3);
  for (const auto& [epoch, a] : epochs) {
    INFO("epoch " << epoch);
    CHECK(a.failed == std::multiset<uint64_t>{deleted, shrinking});
    CHECK(a.reasons.at(deleted).find("ENOENT") != std::string::npos);
    std::multiset<int64_t> all(a.delivered);
    for (uint64_t f : a.failed) all.insert(static_cast<int64_t>(f));
    std::multiset<int64_t> want;
    for (uint64_t i = 0; i < n; ++i) want.insert(static_cast<int64_t>(i));
    CHECK(all == want);
  }
}

TEST_CASE(
    "read faults: a file deleted mid-stream is a skipped sample naming it, or ends the "
    "stream under fail_fast",
    "[read_faults]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 7);
  auto base = MakePipeline(dir.path());
  const uint64_t victim = 20;  // the last sample
  const std::string rel(base->dataset->relative_path(victim));
  const std::vector<uint8_t> saved = [&] {
    std::vector<uint8_t> bytes;
    REQUIRE(ReadWholeFile(dir.Sub(rel), 1 << 20, &bytes).ok());
    return bytes;
  }();

  for (ErrorPolicy policy : {ErrorPolicy::kSkip, ErrorPolicy::kFailFast}) {
    INFO(ToString(policy));
    testing::WriteFile(dir.Sub(rel), saved);
    auto p = std::make_shared<PipelineConfig>(*base);
    p->error_policy = policy;
    p->max_failure_rate = 1.0;
    auto engine = MakeEngine(2, FastRetries());
    StreamOptions so = Epochs(3);
    so.shuffle = false;
    so.num_slots = 1;
    auto stream = engine->OpenStream(p, so);
    REQUIRE(stream.ok());
    // Epoch 0 whole, then the file goes once batch 0 of epoch 1 is here.
    Collected c;
    for (;;) {
      auto next = (*stream)->Next(absl::Seconds(60));
      REQUIRE(next.ok());
      REQUIRE(next->has_value());
      const BatchInfo b = **next;
      CHECK(b.failures.empty());
      REQUIRE((*stream)->Release(b.slot).ok());
      if (b.epoch == 1) break;
    }
    std::filesystem::remove(dir.Sub(rel));
    const Collected rest = Drain(**stream);
    // Sample 20 is the last of epochs 1 and 2 (6 batches each), five batches
    // ahead of what one slot lets the stream hold: both reads come after it
    // went.
    if (policy == ErrorPolicy::kSkip) {
      REQUIRE(rest.end.ok());
      std::vector<std::pair<uint64_t, SampleFailure>> failures;
      for (const BatchInfo& b : rest.batches) {
        for (const SampleFailure& f : b.failures) failures.emplace_back(b.epoch, f);
      }
      REQUIRE(failures.size() == 2);
      for (size_t i = 0; i < failures.size(); ++i) {
        CHECK(failures[i].first == i + 1);
        CHECK(failures[i].second.path == rel);
        CHECK(failures[i].second.sample_index == victim);
        CHECK(failures[i].second.reason.find("ENOENT") != std::string::npos);
      }
      CHECK(rest.indices.size() == 2 * 21 - 4 - 2);
    } else {
      REQUIRE(absl::IsDataLoss(rest.end));
      CHECK(std::string(rest.end.message()).find(rel) != std::string::npos);
      for (const BatchInfo& b : rest.batches) CHECK(b.failures.empty());
      CHECK(rest.batches.size() == 4);  // batches 1-4 of epoch 1, then the victim's
    }
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// Issue 16 #9: a read that fails must not leave its buffer grown to the
// file's size. The engine keeps a stream's fetch buffers between samples
// and frees only those over 1 MiB after a decode (config/README.md,
// "Memory: the worst case"); a failed fetch never reaches the decode, so a
// buffer grown for a large file that then failed (EIO, truncated while
// read) would stay at up to max_file_bytes for the stream's life, once per
// buffer (fetch_queue_capacity + decode_concurrency of them).
TEST_CASE("read faults: a failed read gives back the memory it grew its buffer by",
          "[read_faults][memory]") {
  TempDir dir;
  const std::string path = dir.Sub("large.bin");
  constexpr size_t kSize = 8u << 20;
  {
    std::ofstream f(path, std::ios::binary);
    const std::string chunk(1u << 20, 'x');
    for (size_t i = 0; i < kSize / chunk.size(); ++i) f << chunk;
  }
  ReadFault truncated;
  truncated.end_after_bytes = 4096;
  const ReadFault eio = Errno(EIO);  // the first pread, after the buffer grew to the size

  for (const ReadFault& fault : {truncated, eio}) {
    auto faults = std::make_shared<FaultInjectingReader>();
    faults->Plan("large.bin", fault);
    std::vector<uint8_t> buffer(4096);  // a small buffer kept from an earlier sample
    const size_t kept = buffer.capacity();
    const absl::Status s = ReadWholeFile(path, kSize, &buffer, *faults);
    INFO(s);
    REQUIRE_FALSE(s.ok());
    CHECK(s.message().find(path) != std::string::npos);
    CHECK(buffer.capacity() <= kept);
    CHECK(faults->injected() == 1);
  }
  // A successful read keeps what it grew (the engine decides what to keep).
  std::vector<uint8_t> buffer;
  REQUIRE(ReadWholeFile(path, kSize, &buffer).ok());
  CHECK(buffer.size() == kSize);
}

}  // namespace
}  // namespace conveyor
