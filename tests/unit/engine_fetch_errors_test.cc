// Fetch errors: errors of the system (EMFILE, EIO, ...) are retried and never
// leave a gap in a batch; when they persist the stream ends with UNAVAILABLE
// naming the file and the errno; errors of the sample still follow the
// error policy. A SampleSource wrapper injects the errors on cue.
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include <catch2/catch.hpp>

#include "core/base/posix_error.h"
#include "core/data/file_reader.h"
#include "core/data/sample_source.h"
#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

using testing::Collected;
using testing::Drain;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::RunOnce;
using testing::TempDir;
using testing::WaitFor;

// Reads the dataset's files, but the first `failures` reads of each sample
// in `victims` (all samples when empty) fail with `error_number`, in turn
// with `alternate` when non-zero. `failures` < 0: every read of them fails.
class FlakySource final : public SampleSource {
 public:
  FlakySource(std::shared_ptr<const DatasetIndex> dataset, int failures, int error_number,
              int alternate = 0, std::set<uint64_t> victims = {})
      : files_(dataset, 64 << 20),
        failures_(failures),
        errno_(error_number),
        alternate_(alternate),
        victims_(std::move(victims)),
        dataset_(std::move(dataset)) {}

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override {
    if (victims_.empty() || victims_.count(index)) {
      int n;
      {
        std::lock_guard<std::mutex> l(mu_);
        n = reads_[index]++;
      }
      if (failures_ < 0 || n < failures_) {
        injected_.fetch_add(1);
        const int e = alternate_ != 0 && n % 2 == 1 ? alternate_ : errno_;
        return PosixError("read " + dataset_->FullPath(index), e);
      }
    }
    return files_.Read(index, out);
  }
  int injected() const { return injected_.load(); }
  int reads(uint64_t index) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = reads_.find(index);
    return it == reads_.end() ? 0 : it->second;
  }

 private:
  const FileSampleSource files_;
  const int failures_, errno_, alternate_;
  const std::set<uint64_t> victims_;
  const std::shared_ptr<const DatasetIndex> dataset_;
  mutable std::mutex mu_;
  mutable std::map<uint64_t, int> reads_;
  mutable std::atomic<int> injected_{0};
};

EngineOptions FastRetries(uint32_t attempts = 8) {
  EngineOptions o;
  o.fetch_retry_max_attempts = attempts;
  o.fetch_retry_initial_backoff = absl::Microseconds(200);
  o.fetch_retry_max_backoff = absl::Milliseconds(2);
  o.fetch_retry_deadline = absl::Seconds(60);
  return o;
}

TEST_CASE("transient errors of the system are retried: batches equal a clean run byte for byte",
          "[engine][errors][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 3, 7);
  auto clean = MakePipeline(dir.path());
  StreamOptions so;
  so.batch_size = 4;
  so.seed = 11;
  so.num_epochs = 2;
  const Collected want = RunOnce(clean, 2, so);
  REQUIRE(want.end.ok());

  auto flaky = std::make_shared<PipelineConfig>(*clean);
  flaky->max_failure_rate = 1.0;  // a skipped sample would not end the stream: it must not happen
  auto source = std::make_shared<FlakySource>(clean->dataset, 3, EMFILE, EIO);
  flaky->source = source;
  const Collected got = RunOnce(flaky, 2, so, FastRetries());
  REQUIRE(got.end.ok());
  CHECK(source->injected() == 3 * 21);  // every sample, once per epoch
  CHECK(got.images == want.images);
  CHECK(got.indices == want.indices);
  REQUIRE(got.batches.size() == want.batches.size());
  for (size_t i = 0; i < got.batches.size(); ++i) {
    CHECK(got.batches[i].failures.empty());
    CHECK(got.batches[i].num_samples == want.batches[i].num_samples);
  }
}

TEST_CASE("persistent errors of the system end the stream with UNAVAILABLE, not a short batch",
          "[engine][errors][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 6);
  auto p = MakePipeline(dir.path());
  p->error_policy = ErrorPolicy::kSkip;
  p->max_failure_rate = 1.0;
  const uint64_t victim = 5;
  auto source = std::make_shared<FlakySource>(p->dataset, -1, EIO, 0, std::set<uint64_t>{victim});
  p->source = source;
  StreamOptions so;
  so.batch_size = 4;
  so.shuffle = false;  // sample 5 sits in batch 1
  const Collected c = RunOnce(p, 2, so, FastRetries(5));
  REQUIRE_FALSE(c.end.ok());
  CHECK(absl::IsUnavailable(c.end));
  const std::string msg(c.end.message());
  CHECK(msg.find(std::string(p->dataset->relative_path(victim))) != std::string::npos);
  CHECK(msg.find("EIO") != std::string::npos);
  CHECK(msg.find("5 attempt") != std::string::npos);
  CHECK(source->reads(victim) == 5);
  // Whatever was delivered is whole: no batch lost the sample silently.
  for (const BatchInfo& b : c.batches) {
    CHECK(b.failures.empty());
    CHECK(b.num_samples == 4);
    CHECK(b.batch_in_epoch == 0);
  }
}

TEST_CASE("the retry deadline ends the stream even with attempts left", "[engine][errors][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  auto p = MakePipeline(dir.path());
  p->source = std::make_shared<FlakySource>(p->dataset, -1, ENOMEM);
  EngineOptions eo = FastRetries(1000000);
  eo.fetch_retry_deadline = absl::Milliseconds(50);
  StreamOptions so;
  so.batch_size = 2;
  const Collected c = RunOnce(p, 2, so, eo);
  CHECK(absl::IsUnavailable(c.end));
  CHECK(std::string(c.end.message()).find("ENOMEM") != std::string::npos);
  CHECK(c.batches.empty());
}

TEST_CASE("errors of the sample still follow the error policy", "[engine][errors][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 5);
  auto p = MakePipeline(dir.path());
  p->max_failure_rate = 1.0;
  // A file that vanished after indexing: ENOENT is the sample's.
  const std::string gone(p->dataset->relative_path(3));
  std::filesystem::remove(dir.Sub(gone));
  StreamOptions so;
  so.batch_size = 5;
  so.shuffle = false;
  const Collected c = RunOnce(p, 2, so, FastRetries());
  REQUIRE(c.end.ok());
  REQUIRE(c.batches.size() == 2);
  REQUIRE(c.batches[0].failures.size() == 1);
  CHECK(c.batches[0].num_samples == 4);
  CHECK(c.batches[0].failures[0].path == gone);
  CHECK(c.batches[0].failures[0].reason.find("ENOENT") != std::string::npos);
  CHECK(c.batches[1].failures.empty());
}

TEST_CASE("a stream waiting to retry holds no worker: another stream runs meanwhile",
          "[engine][errors][retry]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 4);
  auto clean = MakePipeline(dir.path());
  auto stuck = std::make_shared<PipelineConfig>(*clean);
  stuck->source = std::make_shared<FlakySource>(clean->dataset, -1, EAGAIN);
  EngineOptions eo;
  eo.fetch_retry_initial_backoff = absl::Hours(1);  // never due during the test
  eo.fetch_retry_max_backoff = absl::Hours(1);
  auto engine = MakeEngine(1, eo);  // one worker: if it slept in a backoff, nothing would run
  StreamOptions so;
  so.batch_size = 2;
  auto waiting = engine->OpenStream(stuck, so);
  REQUIRE(waiting.ok());
  REQUIRE(WaitFor(
      [&] { return (*waiting)->Stats().stages[static_cast<int>(Stage::kFetch)].failures > 0; }));
  auto other = engine->OpenStream(clean, so);
  REQUIRE(other.ok());
  const Collected c = Drain(**other);
  CHECK(c.end.ok());
  CHECK(c.indices.size() == 8);
  BatchInfo b;
  absl::Status why;
  CHECK((*waiting)->TryNext(&b, &why) == Stream::Poll::kNotReady);
  // The drained stream left; closing the one with a retry pending frees it.
  CHECK(engine->Stats().streams_open == 1);
  waiting->reset();
  CHECK(WaitFor([&] { return engine->Stats().streams_open == 0; }));
}

TEST_CASE("retry options are validated", "[engine][errors][retry]") {
  EngineOptions o;
  o.fetch_retry_max_attempts = 0;
  CHECK(absl::IsInvalidArgument(Engine::Create(o).status()));
  o = EngineOptions();
  o.fetch_retry_initial_backoff = absl::Seconds(2);
  o.fetch_retry_max_backoff = absl::Seconds(1);
  CHECK(absl::IsInvalidArgument(Engine::Create(o).status()));
  o = EngineOptions();
  o.fetch_retry_deadline = absl::ZeroDuration();
  CHECK(absl::IsInvalidArgument(Engine::Create(o).status()));
}

TEST_CASE("the file reader tells errors of the system from errors of the file", "[file_reader]") {
  TempDir dir;
  std::vector<uint8_t> out;
  absl::Status missing = ReadWholeFile(dir.Sub("nope.jpg"), 1 << 20, &out);
  CHECK(absl::IsNotFound(missing));
  CHECK_FALSE(IsSystemError(missing));
  CHECK(std::string(missing.message()).find("nope.jpg") != std::string::npos);

  testing::WriteFile(dir.Sub("big.jpg"), std::vector<uint8_t>(100));
  absl::Status big = ReadWholeFile(dir.Sub("big.jpg"), 10, &out);
  CHECK(absl::IsResourceExhausted(big));
  CHECK_FALSE(IsSystemError(big));
  CHECK_FALSE(IsSystemError(ReadWholeFile(dir.path(), 1 << 20, &out)));

  // Out of file descriptors: the limit lowered to the lowest free fd number,
  // so the next open has no number left.
  rlimit saved;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  const int lowest_free = dup(0);
  REQUIRE(lowest_free >= 0);
  close(lowest_free);
  rlimit low = saved;
  low.rlim_cur = static_cast<rlim_t>(lowest_free);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &low) == 0);
  absl::Status emfile = ReadWholeFile(dir.Sub("big.jpg"), 1 << 20, &out);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK(IsSystemError(emfile));
  CHECK(absl::IsResourceExhausted(emfile));
  CHECK(std::string(emfile.message()).find("EMFILE") != std::string::npos);
  CHECK(std::string(emfile.message()).find("big.jpg") != std::string::npos);
}

}  // namespace
}  // namespace conveyor
