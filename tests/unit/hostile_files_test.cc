// Hostile dataset entries: FIFOs (and other non-regular files) are refused as
// errors of the sample without ever blocking a worker or the index load, and
// no symbolic link below a dataset root is followed, at index time or at read
// time (a file swapped for a link after indexing included), so nothing outside
// the root is ever read. Every wait here is bounded: a regression fails the
// test instead of hanging it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/data/dataset_index.h"
#include "core/data/file_reader.h"
#include "core/data/sample_source.h"
#include "core/engine/engine.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor {
namespace {

namespace fs = std::filesystem;
using testing::Collected;
using testing::MakeImageFolder;
using testing::RunOnce;
using testing::TempDir;

// Runs `work` on a thread and waits for it at most `limit`. If it is still
// running then (it blocks, the defect), calls `unblock` until it returns so
// the test can end, and reports false.
bool FinishesWithin(const std::function<void()>& work, const std::function<void()>& unblock,
                    std::chrono::seconds limit = std::chrono::seconds(20)) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t([&] {
    work();
    std::lock_guard<std::mutex> l(mu);
    done = true;
    cv.notify_all();
  });
  bool in_time;
  {
    std::unique_lock<std::mutex> l(mu);
    in_time = cv.wait_for(l, limit, [&] { return done; });
    while (!done) {
      l.unlock();
      unblock();
      l.lock();
      cv.wait_for(l, std::chrono::milliseconds(50), [&] { return done; });
    }
  }
  t.join();
  return in_time;
}

// Ends a blocked open() or read() of the FIFO: a writer comes and goes.
void PokeFifo(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) ::close(fd);
}

void MakeFifo(const std::string& path) { REQUIRE(::mkfifo(path.c_str(), 0644) == 0); }

void WriteListFile(const std::string& path, const std::vector<std::pair<std::string, int>>& e) {
  std::ofstream f(path);
  for (const auto& [rel, label] : e) f << rel << '\t' << label << '\n';
}

std::shared_ptr<PipelineConfig> PipelineOver(std::shared_ptr<const DatasetIndex> index) {
  auto p = std::make_shared<PipelineConfig>();
  p->name = "test";
  p->dataset = std::move(index);
  p->transform.output_height = p->transform.output_width = 32;
  p->error_policy = ErrorPolicy::kSkip;
  p->max_failure_rate = 1.0;
  REQUIRE(ValidatePipelineConfig(*p).ok());
  return p;
}

// One epoch, unshuffled, every sample in one batch.
Collected RunEpoch(const std::shared_ptr<const PipelineConfig>& p) {
  StreamOptions so;
  so.batch_size = static_cast<uint32_t>(p->dataset->size());
  so.shuffle = false;
  return RunOnce(p, 2, so);
}

std::vector<std::string> FailedPaths(const Collected& c) {
  std::vector<std::string> out;
  for (const BatchInfo& b : c.batches) {
    for (const SampleFailure& f : b.failures) out.push_back(f.path);
  }
  return out;
}

std::string ReasonFor(const Collected& c, const std::string& path) {
  for (const BatchInfo& b : c.batches) {
    for (const SampleFailure& f : b.failures) {
      if (f.path == path) return f.reason;
    }
  }
  return "";
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------- FIFOs ----

TEST_CASE("a FIFO named in a list file is a skipped sample, never a stuck worker",
          "[hostile][fifo]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 4);
  MakeFifo(dir.Sub("class_0/pipe.jpg"));
  WriteListFile(dir.Sub("list.txt"), {{"class_0/img_1000.jpg", 0},
                                      {"class_0/pipe.jpg", 1},
                                      {"class_0/img_1001.jpg", 0},
                                      {"class_0/img_1002.jpg", 0},
                                      {"class_0/img_1003.jpg", 0}});
  auto index = DatasetIndex::LoadListFile(dir.Sub("list.txt"));
  REQUIRE(index.ok());
  Collected c;
  CHECK(FinishesWithin([&] { c = RunEpoch(PipelineOver(*index)); },
                       [&] { PokeFifo(dir.Sub("class_0/pipe.jpg")); }));
  REQUIRE(c.end.ok());
  CHECK(c.labels.size() == 4);
  CHECK(FailedPaths(c) == std::vector<std::string>{"class_0/pipe.jpg"});
  CHECK(Contains(ReasonFor(c, "class_0/pipe.jpg"), "not a regular file (FIFO)"));
}

TEST_CASE("a FIFO in an image folder, or swapped in after indexing, is a skipped sample",
          "[hostile][fifo]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 2, 3);
  MakeFifo(dir.Sub("class_0/x.jpg"));
  auto index = DatasetIndex::LoadImageFolder(dir.path());
  REQUIRE(index.ok());
  // Indexed, so that reading it reports it.
  REQUIRE((*index)->size() == 7);
  fs::remove(dir.Sub("class_1/img_1001.jpg"));
  MakeFifo(dir.Sub("class_1/img_1001.jpg"));
  Collected c;
  CHECK(FinishesWithin([&] { c = RunEpoch(PipelineOver(*index)); },
                       [&] {
                         PokeFifo(dir.Sub("class_0/x.jpg"));
                         PokeFifo(dir.Sub("class_1/img_1001.jpg"));
                       }));
  REQUIRE(c.end.ok());
  CHECK(c.labels.size() == 5);
  CHECK(FailedPaths(c) == std::vector<std::string>{"class_0/x.jpg", "class_1/img_1001.jpg"});
  CHECK(Contains(ReasonFor(c, "class_0/x.jpg"), "not a regular file (FIFO)"));
  CHECK(Contains(ReasonFor(c, "class_1/img_1001.jpg"), "not a regular file (FIFO)"));
}

TEST_CASE("a FIFO given as list file or as a path is refused, not waited on", "[hostile][fifo]") {
  TempDir dir;
  MakeFifo(dir.Sub("list.txt"));
  absl::Status list = absl::OkStatus();
  CHECK(FinishesWithin([&] { list = DatasetIndex::LoadListFile(dir.Sub("list.txt")).status(); },
                       [&] { PokeFifo(dir.Sub("list.txt")); }));
  CHECK(absl::IsInvalidArgument(list));
  CHECK(Contains(std::string(list.message()), "list.txt"));
  CHECK(Contains(std::string(list.message()), "not a regular file (FIFO)"));

  std::vector<uint8_t> out;
  absl::Status read = absl::OkStatus();
  CHECK(FinishesWithin([&] { read = ReadWholeFile(dir.Sub("list.txt"), 1 << 20, &out); },
                       [&] { PokeFifo(dir.Sub("list.txt")); }));
  CHECK(absl::IsInvalidArgument(read));
  CHECK(Contains(std::string(read.message()), "not a regular file (FIFO)"));
}

// ------------------------------------------------------------- symlinks ----

// A dataset root with class `cat` (two images) next to a folder `outside`
// holding a secret image that no read through the dataset may return.
struct LinkFixture {
  TempDir dir;
  std::string root = dir.Sub("root");
  std::string outside = dir.Sub("outside");
  std::vector<uint8_t> secret = testing::EncodeNoiseJpeg(40, 40, 99);
  LinkFixture() {
    testing::WriteFile(root + "/cat/a.jpg", testing::EncodeNoiseJpeg(40, 40, 1));
    testing::WriteFile(root + "/cat/b.jpg", testing::EncodeNoiseJpeg(40, 40, 2));
    testing::WriteFile(outside + "/secret.jpg", secret);
    testing::WriteFile(outside + "/b.jpg", secret);
  }
};

// Reads every sample of `index` through FileSampleSource, with openat2 and
// with the fallback: no read may return the secret; returns the errors by
// relative path (the same for both ways).
std::map<std::string, std::string> ReadAll(const std::shared_ptr<const DatasetIndex>& index,
                                           const std::vector<uint8_t>& secret) {
  std::map<std::string, std::string> errors[2];
  for (int fallback = 0; fallback < 2; ++fallback) {
    SetOpenat2MissingForTesting(fallback == 1);
    FileSampleSource source(index, 1 << 20);
    for (size_t i = 0; i < index->size(); ++i) {
      std::vector<uint8_t> out;
      const absl::Status s = source.Read(i, &out);
      INFO(index->relative_path(i) << (fallback ? " (fallback)" : " (openat2)"));
      if (s.ok()) {
        CHECK_FALSE((out == secret));
      } else {
        errors[fallback][std::string(index->relative_path(i))] = std::string(s.message());
        CHECK(absl::IsPermissionDenied(s));
        CHECK(Contains(std::string(s.message()), "symbolic link refused"));
        // Named below the dataset root, never by the server's absolute path
        // (the message reaches clients).
        CHECK(std::string(s.message()).find(index->relative_path(i) + ": symbolic link refused") ==
              0);
        CHECK_FALSE(Contains(std::string(s.message()), index->root()));
      }
    }
  }
  SetOpenat2MissingForTesting(false);
  CHECK(errors[0] == errors[1]);
  return errors[0];
}

std::vector<std::string> Keys(const std::map<std::string, std::string>& m) {
  std::vector<std::string> out;
  for (const auto& [k, v] : m) out.push_back(k);
  return out;
}

TEST_CASE("a path with \"..\" never leads out of the root, with openat2 or without",
          "[hostile][symlink]") {
  testing::TempDir dir;
  const std::vector<uint8_t> secret = {'s', 'e', 'c', 'r', 'e', 't'};
  testing::WriteFile(dir.Sub("outside.jpg"), secret);
  ::mkdir(dir.Sub("root").c_str(), 0755);
  ::mkdir(dir.Sub("root/class_0").c_str(), 0755);
  UniqueFd root(::open(dir.Sub("root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  REQUIRE(root.valid());
  for (bool fallback : {false, true}) {
    SetOpenat2MissingForTesting(fallback);
    for (const char* rel : {"../outside.jpg", "class_0/../../outside.jpg"}) {
      INFO(rel << (fallback ? " (fallback)" : " (openat2)"));
      std::vector<uint8_t> out;
      const absl::Status s = ReadFileBeneath(root.get(), dir.Sub("root"), rel, 1 << 20, &out);
      CHECK(absl::IsPermissionDenied(s));
      CHECK(Contains(std::string(s.message()), "leads outside the dataset root"));
      CHECK_FALSE((out == secret));
    }
  }
  SetOpenat2MissingForTesting(false);
}

TEST_CASE("ImageFolder: links below the root are never followed", "[hostile][symlink]") {
  LinkFixture f;
  fs::create_symlink(f.outside + "/secret.jpg", f.root + "/cat/link.jpg");  // a file link
  fs::create_symlink(f.outside, f.root + "/dog");                           // a class folder link
  auto index = DatasetIndex::LoadImageFolder(f.root);
  REQUIRE(index.ok());
  // The folder link is no class; the file link is a sample that is refused.
  CHECK((*index)->class_names() == std::vector<std::string>{"cat"});
  REQUIRE((*index)->size() == 3);
  CHECK(Keys(ReadAll(*index, f.secret)) == std::vector<std::string>{"cat/link.jpg"});

  const Collected c = RunEpoch(PipelineOver(*index));
  REQUIRE(c.end.ok());
  CHECK(c.labels.size() == 2);
  CHECK(FailedPaths(c) == std::vector<std::string>{"cat/link.jpg"});
  CHECK(Contains(ReasonFor(c, "cat/link.jpg"), "symbolic link refused"));
}

TEST_CASE("list file: a path through a link to a file or a folder is refused",
          "[hostile][symlink]") {
  LinkFixture f;
  fs::create_symlink(f.outside + "/secret.jpg", f.root + "/cat/link.jpg");
  fs::create_symlink(f.outside, f.root + "/dog");
  fs::create_symlink("a.jpg", f.root + "/cat/relative.jpg");  // stays inside: refused all the same
  WriteListFile(f.root + "/list.txt", {{"cat/a.jpg", 0},
                                       {"cat/link.jpg", 0},
                                       {"dog/secret.jpg", 1},
                                       {"cat/relative.jpg", 0},
                                       {"cat/b.jpg", 0}});
  auto index = DatasetIndex::LoadListFile(f.root + "/list.txt");
  REQUIRE(index.ok());
  CHECK(Keys(ReadAll(*index, f.secret)) ==
        std::vector<std::string>{"cat/link.jpg", "cat/relative.jpg", "dog/secret.jpg"});
}

TEST_CASE("a file or class folder swapped for a link after indexing is not read",
          "[hostile][symlink]") {
  LinkFixture f;
  testing::WriteFile(f.root + "/dog/b.jpg", testing::EncodeNoiseJpeg(40, 40, 3));
  auto index = DatasetIndex::LoadImageFolder(f.root);
  REQUIRE(index.ok());
  REQUIRE((*index)->size() == 3);
  CHECK(ReadAll(*index, f.secret).empty());

  fs::remove(f.root + "/cat/b.jpg");
  fs::create_symlink(f.outside + "/secret.jpg", f.root + "/cat/b.jpg");
  fs::remove_all(f.root + "/dog");
  fs::create_symlink(f.outside, f.root + "/dog");  // dog/b.jpg now leads to the secret
  CHECK(Keys(ReadAll(*index, f.secret)) == std::vector<std::string>{"cat/b.jpg", "dog/b.jpg"});
}

}  // namespace
}  // namespace conveyor
