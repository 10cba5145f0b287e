// The node-local object cache (remote/object_cache.h) and its reader
// (remote/cached_object_reader.h): entries kept and served by validators,
// the byte budget and the two eviction policies, temporary and corrupt
// files removed at start, a full disk (injected) turning the cache
// read-only, and, against the real HTTP object server on loopback,
// concurrent misses of one object filling it once and a replaced object
// fetched again.
#ifdef CONVEYOR_HAVE_SERVER
#include <errno.h>

#include <chrono>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "core/base/mutex.h"
#include "core/base/posix_error.h"
#include "eventually.h"
#include "object_server.h"
#include "remote/cache_eviction.h"
#include "remote/cached_object_reader.h"
#include "remote/object_cache.h"
#include "remote/remote_reader.h"
#include "temp_dir.h"

namespace conveyor::remote {
namespace {

using testing::ObjectServer;
using testing::TempDir;

std::vector<uint8_t> Data(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + seed * 7 + i / 251) & 0xff);
  return v;
}

ObjectValidators V(const std::vector<uint8_t>& d, std::string etag) {
  return ObjectValidators{std::move(etag), "Sat, 05 Dec 2026 00:00:00 GMT", d.size()};
}

std::shared_ptr<ObjectCache> Open(const std::string& dir, uint64_t budget,
                                  CacheEvictionKind kind = CacheEvictionKind::kFixedSubset,
                                  std::shared_ptr<const CacheFileWriter> writer = nullptr) {
  CacheOptions o;
  o.dir = dir;
  o.max_bytes = budget;
  o.eviction = kind;
  auto c = ObjectCache::Open(o, std::move(writer));
  REQUIRE(c.ok());
  return *c;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename() != "lock") names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST_CASE("ObjectCache serves an entry only for the validators it was kept with",
          "[object_cache]") {
  TempDir dir;
  auto cache = Open(dir.path(), 1 << 20);
  const std::vector<uint8_t> a = Data(5000, 1);
  std::vector<uint8_t> out;
  CHECK_FALSE(cache->Get("http://h/a", V(a, "\"1\""), &out));
  cache->Put("http://h/a", V(a, "\"1\""), a);
  CHECK(cache->Contains("http://h/a"));
  REQUIRE(cache->Get("http://h/a", V(a, "\"1\""), &out));
  CHECK(out == a);
  // Another ETag, another Last-Modified or another size: a miss.
  CHECK_FALSE(cache->Get("http://h/a", V(a, "\"2\""), &out));
  ObjectValidators later = V(a, "\"1\"");
  later.last_modified = "Sun, 06 Dec 2026 00:00:00 GMT";
  CHECK_FALSE(cache->Get("http://h/a", later, &out));
  ObjectValidators longer = V(a, "\"1\"");
  longer.size += 1;
  CHECK_FALSE(cache->Get("http://h/a", longer, &out));
  // The new version replaces the old.
  const std::vector<uint8_t> b = Data(6000, 2);
  cache->Put("http://h/a", V(b, "\"2\""), b);
  CHECK_FALSE(cache->Get("http://h/a", V(a, "\"1\""), &out));
  REQUIRE(cache->Get("http://h/a", V(b, "\"2\""), &out));
  CHECK(out == b);
  const ObjectCache::Counters c = cache->counters();
  CHECK(c.hits == 2);
  CHECK(c.entries == 1);
  CHECK(c.fills == 2);
  CHECK(c.bytes_from_cache == a.size() + b.size());
  CHECK(Files(dir.path()).size() == 1);
}

TEST_CASE("ObjectCache serves a range of an entry (tar shards) by the same validators",
          "[object_cache]") {
  TempDir dir;
  auto cache = Open(dir.path(), 1 << 20);
  const std::vector<uint8_t> a = Data(50000, 1);
  cache->Put("http://h/shard.tar", V(a, "s"), a);
  std::vector<uint8_t> out;
  REQUIRE(cache->GetRange("http://h/shard.tar", V(a, "s"), 1000, 2345, &out));
  CHECK(out == std::vector<uint8_t>(a.begin() + 1000, a.begin() + 3345));
  REQUIRE(cache->GetRange("http://h/shard.tar", V(a, "s"), 49000, 1000, &out));
  CHECK(out == std::vector<uint8_t>(a.end() - 1000, a.end()));
  CHECK_FALSE(cache->GetRange("http://h/shard.tar", V(a, "t"), 0, 10, &out));
  CHECK_FALSE(cache->GetRange("http://h/shard.tar", V(a, "s"), 49000, 1001, &out));
  CHECK(cache->counters().hits == 2);
}

TEST_CASE("ObjectCache keeps its entries across a restart and removes temporary and corrupt files",
          "[object_cache]") {
  TempDir dir;
  const std::vector<uint8_t> a = Data(4000, 1), b = Data(4100, 2), c = Data(4200, 3);
  {
    auto cache = Open(dir.path(), 1 << 20);
    cache->Put("http://h/a", V(a, "a"), a);
    cache->Put("http://h/b", V(b, "b"), b);
    cache->Put("http://h/c", V(c, "c"), c);
  }
  std::vector<std::string> entries = Files(dir.path());
  REQUIRE(entries.size() == 3);
  // A write that did not finish, an entry with a flipped byte, a truncated
  // one, and a file that is not the cache's.
  dir.Write("tmp.123.1.0000000000000000.obj", "half an entry");
  dir.Write("notes.txt", "left alone");
  std::map<std::string, std::vector<uint8_t>> before;
  {
    auto cache = Open(dir.path(), 1 << 20);
    for (const auto& [key, data] : std::vector<std::pair<std::string, std::vector<uint8_t>>>{
             {"http://h/a", a}, {"http://h/b", b}, {"http://h/c", c}}) {
      std::vector<uint8_t> out;
      REQUIRE(cache->Get(key, V(data, key.substr(9)), &out));
      CHECK(out == data);
    }
    CHECK(cache->counters().removed_at_start == 1);
  }
  const std::string first = dir.Sub(entries[0]);
  const std::string second = dir.Sub(entries[1]);
  {
    std::fstream f(first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a' ^ static_cast<char>(f.peek()));
  }
  std::filesystem::resize_file(second, std::filesystem::file_size(second) - 7);
  auto cache = Open(dir.path(), 1 << 20);
  const ObjectCache::Counters n = cache->counters();
  CHECK(n.removed_at_start == 2);
  CHECK(n.entries == 1);
  const std::vector<std::string> left = Files(dir.path());
  CHECK(left == std::vector<std::string>{entries[2], "notes.txt"});
}

TEST_CASE("ObjectCache stays within its budget: LRU evicts the oldest, fixed admits while room",
          "[object_cache]") {
  const std::vector<uint8_t> a = Data(40000, 1), b = Data(40000, 2), c = Data(40000, 3);
  const uint64_t budget = 100000;  // two entries, not three
  SECTION("lru") {
    TempDir dir;
    auto cache = Open(dir.path(), budget, CacheEvictionKind::kLru);
    std::vector<uint8_t> out;
    cache->Put("a", V(a, "a"), a);
    cache->Put("b", V(b, "b"), b);
    REQUIRE(cache->Get("a", V(a, "a"), &out));  // b is now the least recently used
    cache->Put("c", V(c, "c"), c);
    CHECK(cache->Contains("a"));
    CHECK_FALSE(cache->Contains("b"));
    CHECK(cache->Contains("c"));
    CHECK(cache->counters().evictions == 1);
    CHECK(cache->counters().bytes_held <= budget);
    CHECK(Files(dir.path()).size() == 2);
  }
  SECTION("fixed") {
    TempDir dir;
    auto cache = Open(dir.path(), budget, CacheEvictionKind::kFixedSubset);
    cache->Put("a", V(a, "a"), a);
    cache->Put("b", V(b, "b"), b);
    cache->Put("c", V(c, "c"), c);
    CHECK(cache->Contains("a"));
    CHECK(cache->Contains("b"));
    CHECK_FALSE(cache->Contains("c"));
    CHECK(cache->counters().evictions == 0);
    CHECK(cache->counters().bytes_held <= budget);
  }
  SECTION("fixed: a new version that does not fit drops the old one's file too") {
    TempDir dir;
    auto cache = Open(dir.path(), budget, CacheEvictionKind::kFixedSubset);
    cache->Put("a", V(a, "a"), a);
    cache->Put("b", V(b, "b"), b);
    const std::vector<uint8_t> bigger = Data(70000, 4);
    cache->Put("a", V(bigger, "a2"), bigger);  // a changed upstream, and grew
    CHECK_FALSE(cache->Contains("a"));
    CHECK(cache->Contains("b"));
    CHECK(Files(dir.path()).size() == 1);
    CHECK(cache->counters().bytes_held <= budget);
  }
  SECTION("a smaller budget at start drops entries") {
    TempDir dir;
    {
      auto cache = Open(dir.path(), budget, CacheEvictionKind::kLru);
      cache->Put("a", V(a, "a"), a);
      cache->Put("b", V(b, "b"), b);
    }
    auto cache = Open(dir.path(), 60000, CacheEvictionKind::kLru);
    CHECK(cache->counters().entries == 1);
    CHECK(Files(dir.path()).size() == 1);
  }
}

TEST_CASE("ObjectCache: one process per folder (its lock), free again once closed",
          "[object_cache]") {
  TempDir dir;
  CacheOptions o;
  o.dir = dir.path();
  o.max_bytes = 1 << 20;
  {
    auto first = ObjectCache::Open(o);
    REQUIRE(first.ok());
    // flock locks belong to the open file: a second open, even in this
    // process, is refused as another daemon's would be.
    auto second = ObjectCache::Open(o);
    REQUIRE(absl::IsFailedPrecondition(second.status()));
    CHECK(second.status().message().find("in use") != absl::string_view::npos);
  }
  CHECK(ObjectCache::Open(o).ok());
}

// A disk that fills after `room` bytes.
class FullDiskWriter final : public CacheFileWriter {
 public:
  explicit FullDiskWriter(uint64_t room) : room_(room) {}
  absl::Status Write(int fd, std::span<const uint8_t> bytes) const override {
    MutexLock lock(&mu_);
    if (bytes.size() > room_) return PosixError("write", ENOSPC);
    room_ -= bytes.size();
    return CacheFileWriter::Write(fd, bytes);
  }

 private:
  mutable Mutex mu_;
  mutable uint64_t room_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("ObjectCache on a full disk keeps serving what it holds and writes nothing more",
          "[object_cache]") {
  TempDir dir;
  const std::vector<uint8_t> a = Data(10000, 1), b = Data(10000, 2), c = Data(10, 3);
  auto cache = Open(dir.path(), 1 << 20, CacheEvictionKind::kFixedSubset,
                    std::make_shared<FullDiskWriter>(15000));
  cache->Put("a", V(a, "a"), a);
  cache->Put("b", V(b, "b"), b);  // ENOSPC
  CHECK(cache->counters().read_only);
  cache->Put("c", V(c, "c"), c);  // would fit, but the cache writes no more
  std::vector<uint8_t> out;
  REQUIRE(cache->Get("a", V(a, "a"), &out));
  CHECK(out == a);
  CHECK_FALSE(cache->Contains("b"));
  CHECK_FALSE(cache->Contains("c"));
  CHECK(Files(dir.path()).size() == 1);  // no temporary file left
}

// Epoch scans (each epoch reads every object once, in a new order) of a
// dataset twice the cache: the fraction of reads from the cache after the
// first epoch.
double ScanHitRate(CacheEvictionKind kind, bool shuffled) {
  constexpr int kObjects = 200;
  constexpr int kEpochs = 5;
  auto policy = MakeCacheEviction(kind);
  std::map<std::string, bool> in;
  uint64_t used = 0;
  const uint64_t budget = kObjects / 2;
  uint64_t hits = 0, reads = 0;
  std::vector<int> order(kObjects);
  for (int i = 0; i < kObjects; ++i) order[i] = i;
  uint64_t seed = 1;
  for (int epoch = 0; epoch < kEpochs; ++epoch) {
    if (shuffled) {
      for (int i = kObjects - 1; i > 0; --i) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(order[i], order[static_cast<int>((seed >> 33) % static_cast<uint64_t>(i + 1))]);
      }
    }
    for (const int i : order) {
      const std::string key = std::to_string(i);
      const bool hit = in.count(key) != 0;
      if (epoch > 0) {
        ++reads;
        hits += hit ? 1 : 0;
      }
      if (hit) {
        policy->Touched(key);
        continue;
      }
      if (!policy->Admit(1, used, budget)) continue;
      while (used + 1 > budget) {
        std::optional<std::string> v = policy->Victim();
        if (!v.has_value()) break;
        policy->Removed(*v);
        in.erase(*v);
        --used;
      }
      if (used + 1 > budget) continue;
      in[key] = true;
      ++used;
      policy->Added(key, 1);
    }
  }
  return static_cast<double>(hits) / static_cast<double>(reads);
}

TEST_CASE("Eviction on epoch scans of twice the cache: fixed keeps half, LRU keeps nothing",
          "[object_cache]") {
  CHECK(ScanHitRate(CacheEvictionKind::kLru, /*shuffled=*/false) == 0.0);
  CHECK(ScanHitRate(CacheEvictionKind::kFixedSubset, false) == 0.5);
  CHECK(ScanHitRate(CacheEvictionKind::kFixedSubset, true) == 0.5);
  CHECK(ScanHitRate(CacheEvictionKind::kLru, true) < 0.5);
}

struct Results {
  Mutex mu;
  std::vector<absl::Status> statuses ABSL_GUARDED_BY(mu);
  size_t Count() {
    MutexLock lock(&mu);
    return statuses.size();
  }
};

TEST_CASE("CachedObjectReader: concurrent misses are one GET; later reads come from disk",
          "[object_cache]") {
  TempDir root;
  const std::vector<uint8_t> data = Data(300000, 7);
  std::ofstream(root.Sub("obj"), std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  ObjectServer server(root.path(), {"--latency-ms", "20"});
  TempDir dir;
  auto remote = RemoteReader::Create(RemoteOptions{}, S3Config{});
  REQUIRE(remote.ok());
  auto cache = Open(dir.path(), 16 << 20);
  CachedObjectReader reader(*remote, cache);
  constexpr int kReads = 8;
  std::vector<std::vector<uint8_t>> outs(kReads);
  Results results;
  std::vector<std::shared_ptr<PendingRead>> pending;
  for (int i = 0; i < kReads; ++i) {
    pending.push_back(
        reader.ReadWholeAsync(server.Url("obj"), 1 << 30, &outs[i], [&results](absl::Status st) {
          MutexLock lock(&results.mu);
          results.statuses.push_back(std::move(st));
        }));
  }
  REQUIRE(testing::Eventually([&] { return results.Count() == kReads; }));
  {
    MutexLock lock(&results.mu);
    for (const absl::Status& st : results.statuses) CHECK(st.ok());
  }
  for (const auto& out : outs) CHECK(out == data);
  CHECK(reader.fills() == 1);
  CHECK(cache->counters().fills == 1);

  std::vector<uint8_t> again;
  Results second;
  reader.ReadWholeAsync(server.Url("obj"), 1 << 30, &again, [&second](absl::Status st) {
    MutexLock lock(&second.mu);
    second.statuses.push_back(std::move(st));
  });
  REQUIRE(testing::Eventually([&] { return second.Count() == 1; }));
  CHECK(again == data);
  CHECK(reader.fills() == 1);
  CHECK(cache->counters().hits >= 1);

  // Replaced upstream: the HEAD names a new version, fetched again.
  const std::vector<uint8_t> newer = Data(300000, 8);
  {
    std::ofstream f(root.Sub("obj.new"), std::ios::binary);
    f.write(reinterpret_cast<const char*>(newer.data()),
            static_cast<std::streamsize>(newer.size()));
  }
  std::filesystem::rename(root.Sub("obj.new"), root.Sub("obj"));
  std::vector<uint8_t> third;
  Results after;
  reader.ReadWholeAsync(server.Url("obj"), 1 << 30, &third, [&after](absl::Status st) {
    MutexLock lock(&after.mu);
    after.statuses.push_back(std::move(st));
  });
  REQUIRE(testing::Eventually([&] { return after.Count() == 1; }));
  CHECK(third == newer);
  CHECK(reader.fills() == 2);
}

TEST_CASE(
    "CachedObjectReader: an object its server declared fresh is served without a HEAD "
    "until the lifetime ends",
    "[object_cache]") {
  TempDir root;
  auto write = [&root](const std::string& name, const std::vector<uint8_t>& d) {
    std::ofstream(root.Sub(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(d.data()), static_cast<std::streamsize>(d.size()));
  };
  const std::vector<uint8_t> data = Data(200000, 3);
  write("obj", data);
  // Fresh for 2 s, counted from a second before the HEAD's answer was used.
  ObjectServer server(root.path(), {"--max-age", "2"});
  TempDir dir;
  auto remote = RemoteReader::Create(RemoteOptions{}, S3Config{});
  REQUIRE(remote.ok());
  auto cache = Open(dir.path(), 16 << 20);
  CachedObjectReader reader(*remote, cache);
  auto read = [&reader, &server](std::vector<uint8_t>* out, bool* asked_server) {
    Results results;
    std::shared_ptr<PendingRead> p =
        reader.ReadWholeAsync(server.Url("obj"), 1 << 30, out, [&results](absl::Status st) {
          MutexLock lock(&results.mu);
          results.statuses.push_back(std::move(st));
        });
    // A fresh entry is read at once, on this thread: no handle, no HEAD.
    *asked_server = p != nullptr;
    REQUIRE(testing::Eventually([&] { return results.Count() == 1; }));
    MutexLock lock(&results.mu);
    CHECK(results.statuses[0].ok());
  };
  std::vector<uint8_t> first, second, third;
  bool asked = false;
  read(&first, &asked);
  CHECK(asked);
  CHECK(first == data);
  CHECK(reader.fills() == 1);
  const auto filled = std::chrono::steady_clock::now();
  // Replaced upstream while fresh: the server's word stands, the entry is served.
  const std::vector<uint8_t> newer = Data(200000, 4);
  write("obj.new", newer);
  std::filesystem::rename(root.Sub("obj.new"), root.Sub("obj"));
  read(&second, &asked);
  if (std::chrono::steady_clock::now() - filled < std::chrono::milliseconds(900)) {
    CHECK_FALSE(asked);
    CHECK(second == data);
  }
  // Once the lifetime ended the HEAD goes out again and names the new version.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  read(&third, &asked);
  CHECK(asked);
  CHECK(third == newer);
  CHECK(reader.fills() == 2);
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER

#ifdef CONVEYOR_HAVE_SERVER
#include "absl/strings/str_cat.h"
#include "server/ops/metrics_exposition.h"

namespace conveyor::server {
namespace {

TEST_CASE("metrics: the object cache's counters and gauges, none without a cache",
          "[metrics][object_cache]") {
  v1::GetStatsResponse s;
  CHECK(RenderPrometheusText(s).find("conveyor_cache_") == std::string::npos);
  v1::ObjectCacheStats* c = s.mutable_object_cache();
  c->set_hits(7);
  c->set_misses(3);
  c->set_bytes_from_cache(700);
  c->set_bytes_from_network(300);
  c->set_evictions(2);
  c->set_bytes_held(1000);
  c->set_entries(4);
  c->set_read_only(true);
  const std::string text = "\n" + RenderPrometheusText(s);
  INFO(text);
  for (const char* line :
       {"conveyor_cache_hits_total 7", "conveyor_cache_misses_total 3",
        "conveyor_cache_bytes_total{source=\"cache\"} 700",
        "conveyor_cache_bytes_total{source=\"network\"} 300", "conveyor_cache_evictions_total 2",
        "conveyor_cache_bytes_held 1000", "conveyor_cache_entries 4", "conveyor_cache_read_only 1",
        "# TYPE conveyor_cache_hits_total counter", "# TYPE conveyor_cache_bytes_held gauge"}) {
    CHECK(text.find(absl::StrCat("\n", line, "\n")) != std::string::npos);
  }
}

}  // namespace
}  // namespace conveyor::server
#endif  // CONVEYOR_HAVE_SERVER
