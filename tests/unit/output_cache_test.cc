// The output cache (core/engine/output_cache.h) alone — keys, bound,
// eviction, concurrent use — and in the engine: a cached pipeline's second
// epoch decodes nothing and is byte-identical to its first and to the same
// pipeline uncached.
#include "core/engine/output_cache.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/decode/media_decoder.h"
#include "core/engine/engine.h"
#include "remote/cached_output_store.h"
#include "remote/object_cache.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

using testing::Collected;
using testing::Drain;
using testing::MakeEngine;
using testing::MakeImageFolder;
using testing::MakePipeline;
using testing::TempDir;

OutputCache::Bytes Value(size_t n, uint8_t fill) {
  return std::make_shared<const std::vector<uint8_t>>(n, fill);
}

TEST_CASE("the transform fingerprint changes with every field", "[output_cache]") {
  const TransformSpec base;
  const std::string b = TransformFingerprint(base);
  CHECK(TransformFingerprint(TransformSpec{}) == b);
  // One change per field: each must give a fingerprint of its own.
  std::vector<std::pair<const char*, std::function<void(TransformSpec&)>>> changes = {
      {"kind", [](TransformSpec& t) { t.kind = MediaKind::kVideo; }},
      {"mode", [](TransformSpec& t) { t.mode = AugmentMode::kEval; }},
      {"output_height", [](TransformSpec& t) { t.output_height = 225; }},
      {"output_width", [](TransformSpec& t) { t.output_width = 225; }},
      {"layout", [](TransformSpec& t) { t.layout = Layout::kNHWC; }},
      {"dtype", [](TransformSpec& t) { t.dtype = DType::kFloat16; }},
      {"mean[0]", [](TransformSpec& t) { t.mean[0] = 0.4850001f; }},
      {"mean[2]", [](TransformSpec& t) { t.mean[2] = 0.5f; }},
      {"std[1]", [](TransformSpec& t) { t.std[1] = 0.2240001f; }},
      {"scale_min", [](TransformSpec& t) { t.scale_min = 0.09; }},
      {"scale_max", [](TransformSpec& t) { t.scale_max = 0.99; }},
      {"ratio_min", [](TransformSpec& t) { t.ratio_min = 0.7; }},
      {"ratio_max", [](TransformSpec& t) { t.ratio_max = 1.4; }},
      {"flip_probability", [](TransformSpec& t) { t.flip_probability = 0.25; }},
      {"resize_size", [](TransformSpec& t) { t.resize_size = 257; }},
      {"dct_scaling", [](TransformSpec& t) { t.dct_scaling = false; }},
      {"max_pixels", [](TransformSpec& t) { t.max_pixels += 1; }},
      {"max_decode_memory", [](TransformSpec& t) { t.max_decode_memory += 1; }},
      {"max_decode_seconds", [](TransformSpec& t) { t.max_decode_seconds = 2.5; }},
      {"video.clip_frames", [](TransformSpec& t) { t.video.clip_frames = 8; }},
      {"video.frame_stride", [](TransformSpec& t) { t.video.frame_stride = 2; }},
      {"video.fps", [](TransformSpec& t) { t.video.fps = 10; }},
      {"video.clip_start", [](TransformSpec& t) { t.video.clip_start = ClipStart::kCenter; }},
      {"video.max_frames_decoded", [](TransformSpec& t) { t.video.max_frames_decoded = 7; }},
      {"video.max_duration_seconds", [](TransformSpec& t) { t.video.max_duration_seconds = 9; }},
      {"video.autorotate", [](TransformSpec& t) { t.video.autorotate = false; }},
      {"audio.sample_rate", [](TransformSpec& t) { t.audio.sample_rate = 8000; }},
      {"audio.channels", [](TransformSpec& t) { t.audio.channels = 2; }},
      {"audio.clip_samples", [](TransformSpec& t) { t.audio.clip_samples = 100; }},
      {"audio.crop", [](TransformSpec& t) { t.audio.crop = AudioCrop::kCentre; }},
      {"audio.padding", [](TransformSpec& t) { t.audio.padding = AudioPadding::kBoth; }},
      {"audio.max_samples", [](TransformSpec& t) { t.audio.max_samples = 99; }},
      {"audio.max_duration_seconds", [](TransformSpec& t) { t.audio.max_duration_seconds = 9; }},
  };
  std::vector<std::string> seen = {b};
  for (auto& [field, change] : changes) {
    INFO(field);
    TransformSpec t;
    change(t);
    const std::string f = TransformFingerprint(t);
    for (const std::string& s : seen) CHECK(f != s);
    seen.push_back(f);
  }
}

TEST_CASE("the output cache serves what was inserted under the same key only", "[output_cache]") {
  OutputCache c(1 << 20);
  CHECK(c.Lookup("a") == nullptr);
  c.Insert("a", Value(100, 7));
  OutputCache::Bytes hit = c.Lookup("a");
  REQUIRE(hit != nullptr);
  CHECK(hit->size() == 100);
  CHECK((*hit)[99] == 7);
  CHECK(c.Lookup("ab") == nullptr);
  // A second insert of a held key keeps the entry (the output is the same).
  c.Insert("a", Value(100, 9));
  CHECK((*c.Lookup("a"))[0] == 7);
  const OutputCache::Stats s = c.GetStats();
  CHECK(s.hits == 2);
  CHECK(s.misses == 2);
  CHECK(s.inserts == 1);
  CHECK(s.entries == 1);
  CHECK(s.bytes == OutputCache::EntryBytes(1, 100));
  CHECK(s.capacity_bytes == 1 << 20);
}

TEST_CASE("the output cache stays within its bound, evicting the least recently used",
          "[output_cache]") {
  const uint64_t entry = OutputCache::EntryBytes(2, 1000);
  OutputCache c(3 * entry + entry / 2);  // room for three entries
  c.Insert("k0", Value(1000, 0));
  c.Insert("k1", Value(1000, 1));
  c.Insert("k2", Value(1000, 2));
  CHECK(c.GetStats().bytes == 3 * entry);
  REQUIRE(c.Lookup("k0") != nullptr);  // k0 is now the most recent; k1 the least
  c.Insert("k3", Value(1000, 3));
  OutputCache::Stats s = c.GetStats();
  CHECK(s.bytes <= c.capacity_bytes());
  CHECK(s.entries == 3);
  CHECK(s.evictions == 1);
  CHECK(c.Lookup("k1") == nullptr);
  CHECK(c.Lookup("k0") != nullptr);
  CHECK(c.Lookup("k2") != nullptr);
  CHECK(c.Lookup("k3") != nullptr);
  // An evicted value a reader still holds stays valid.
  OutputCache::Bytes held = c.Lookup("k0");
  for (int i = 4; i < 10; ++i) c.Insert("k" + std::to_string(i), Value(1000, uint8_t(i)));
  CHECK((*held)[0] == 0);
  CHECK(c.GetStats().bytes <= c.capacity_bytes());
  // An entry larger than the whole capacity is not kept, and evicts nothing.
  const uint64_t before = c.GetStats().entries;
  c.Insert("huge", Value(4 * 1000, 1));
  CHECK(c.Lookup("huge") == nullptr);
  CHECK(c.GetStats().entries == before);
  CHECK(c.GetStats().refused == 1);
}

TEST_CASE("the output cache is safe for concurrent lookups and inserts", "[output_cache]") {
  // Four threads insert and look up overlapping keys; each records what it
  // saw, checked here on the main thread.
  const uint64_t entry = OutputCache::EntryBytes(8, 512);
  OutputCache c(64 * entry);  // smaller than the 200 keys: eviction runs too
  constexpr int kThreads = 4, kRounds = 2000, kKeys = 200;
  std::vector<int> wrong(kThreads, 0), hits(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const int k = (i * 7 + t * 13) % kKeys;
        char key[16];
        std::snprintf(key, sizeof key, "key%05d", k);
        if (OutputCache::Bytes v = c.Lookup(key)) {
          ++hits[t];
          // Every value is filled with its key's number: never another's.
          if (v->size() != 512 || (*v)[0] != uint8_t(k) || (*v)[511] != uint8_t(k)) ++wrong[t];
        } else {
          c.Insert(key, Value(512, uint8_t(k)));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const OutputCache::Stats s = c.GetStats();
  int total_hits = 0;
  for (int t = 0; t < kThreads; ++t) {
    CHECK(wrong[t] == 0);
    total_hits += hits[t];
  }
  CHECK(s.hits == uint64_t(total_hits));
  CHECK(s.hits + s.misses == uint64_t(kThreads) * kRounds);
  CHECK(s.bytes <= c.capacity_bytes());
  CHECK(s.entries <= 64);
  CHECK(s.evictions > 0);
}

TEST_CASE("a file's identity: regular files only, and it changes with the file", "[output_cache]") {
  TempDir dir;
  const std::filesystem::path root(dir.path());
  MakeImageFolder(root, 1, 2);
  auto index = DatasetIndex::LoadImageFolder(root.string());
  REQUIRE(index.ok());
  FileSampleSource source(*index, 1 << 20);
  std::string a, b, a_again;
  REQUIRE(source.Identity(0, &a));
  REQUIRE(source.Identity(1, &b));
  REQUIRE(source.Identity(0, &a_again));
  CHECK(a == a_again);
  CHECK(a != b);
  CHECK_THAT(a, Catch::StartsWith("file:") && Catch::Contains("class_0/img_1000.jpg"));
  // Rewritten (another size): another identity.
  testing::WriteFile(root / "class_0" / "img_1000.jpg", testing::EncodeNoiseJpeg(40, 30, 5));
  std::string rewritten;
  REQUIRE(source.Identity(0, &rewritten));
  CHECK(rewritten != a);
  // A link or a missing file has none (Read refuses them).
  std::filesystem::remove(root / "class_0" / "img_1001.jpg");
  std::string none;
  CHECK_FALSE(source.Identity(1, &none));
  std::filesystem::create_symlink(root / "class_0" / "img_1000.jpg",
                                  root / "class_0" / "img_1001.jpg");
  CHECK_FALSE(source.Identity(1, &none));
}

TEST_CASE("only a transform that draws nothing may cache its output", "[output_cache]") {
  TransformSpec t;
  CHECK(RandomDraws(t) != nullptr);  // train
  t.mode = AugmentMode::kEval;
  CHECK(RandomDraws(t) == nullptr);
  t.kind = MediaKind::kVideo;
  t.video.clip_start = ClipStart::kRandom;
  CHECK(RandomDraws(t) != nullptr);
  t.video.clip_start = ClipStart::kCenter;
  CHECK(RandomDraws(t) == nullptr);
  t.kind = MediaKind::kAudio;
  t.audio.crop = AudioCrop::kAuto;
  CHECK(RandomDraws(t) == nullptr);  // auto + eval: centre
  t.audio.crop = AudioCrop::kRandom;
  CHECK(RandomDraws(t) != nullptr);
  t.mode = AugmentMode::kTrain;
  t.audio.crop = AudioCrop::kCentre;
  CHECK(RandomDraws(t) == nullptr);

  TempDir dir;
  MakeImageFolder(dir.path(), 1, 2);
  auto p = MakePipeline(dir.path());  // train
  p->cache_output = true;
  p->output_cache = std::make_shared<OutputCache>(1 << 20);
  const absl::Status st = ValidatePipelineConfig(*p);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("cache_output") && Catch::Contains("augment: train"));
  p->transform.mode = AugmentMode::kEval;
  CHECK(ValidatePipelineConfig(*p).ok());
}

// The engine's decoder, counting the samples it decodes.
class CountingDecoder final : public SampleDecoder {
 public:
  explicit CountingDecoder(std::atomic<int>* count) : count_(count) {}
  absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                   uint8_t* out) override {
    count_->fetch_add(1);
    return inner_.Run(bytes, spec, rng, out);
  }

 private:
  std::atomic<int>* count_;
  MediaDecoder inner_;
};

TEST_CASE("a cached eval pipeline decodes nothing after its first epoch",
          "[output_cache][engine]") {
  TempDir dir;
  constexpr int kSamples = 12;
  MakeImageFolder(dir.path(), 2, kSamples / 2);
  // A file that does not decode: a failed sample is not cached.
  testing::WriteFile(std::filesystem::path(dir.path()) / "class_0" / "broken.jpg",
                     {0xFF, 0xD8, 0xFF, 0x00});
  auto uncached = MakePipeline(dir.path(), 24);
  uncached->transform.mode = AugmentMode::kEval;
  uncached->transform.resize_size = 28;
  REQUIRE(ValidatePipelineConfig(*uncached).ok());
  auto cached = std::make_shared<PipelineConfig>(*uncached);
  cached->name = "cached";
  cached->cache_output = true;
  cached->output_cache = std::make_shared<OutputCache>(64 << 20);
  REQUIRE(ValidatePipelineConfig(*cached).ok());

  std::atomic<int> decodes{0};
  EngineOptions eo;
  eo.decoder_factory = [&decodes] { return std::make_unique<CountingDecoder>(&decodes); };
  auto engine = MakeEngine(2, eo);
  StreamOptions so;
  so.batch_size = 5;
  so.seed = 3;
  auto run = [&](const std::shared_ptr<const PipelineConfig>& p, uint64_t epoch) {
    StreamOptions o = so;
    o.first_epoch = epoch;
    auto s = engine->OpenStream(p, o);
    REQUIRE(s.ok());
    Collected c = Drain(**s);
    REQUIRE(c.end.ok());
    return std::make_pair(std::move(c), (*s)->Stats());
  };
  const int total = kSamples + 1;

  auto [plain, plain_stats] = run(uncached, 0);
  CHECK(decodes.load() == total);
  CHECK(plain.labels.size() == kSamples);

  decodes = 0;
  auto [first, first_stats] = run(cached, 0);
  CHECK(decodes.load() == total);
  CHECK(first_stats.output_cache_hits == 0);
  CHECK(first_stats.output_cache_misses == total);
  OutputCache::Stats cs = cached->output_cache->GetStats();
  CHECK(cs.inserts == kSamples);  // not the broken file
  CHECK(cs.entries == kSamples);

  // Epoch 1 (another order): only the broken file is decoded again.
  decodes = 0;
  auto [second, second_stats] = run(cached, 1);
  CHECK(decodes.load() == 1);
  CHECK(second_stats.output_cache_hits == kSamples);
  CHECK(second_stats.output_cache_misses == 1);
  CHECK(second_stats.stages[static_cast<int>(Stage::kDecode)].items_in == 1);
  cs = cached->output_cache->GetStats();
  CHECK(cs.hits == kSamples);
  CHECK(cs.bytes <= cs.capacity_bytes);

  // The same samples, byte for byte, with the same labels: sorted by
  // dataset index, since the epochs' orders differ.
  auto by_index = [&](const Collected& c) {
    const size_t n = c.indices.size();
    const size_t bytes = c.images.size() / n;
    std::vector<std::pair<int64_t, std::pair<int64_t, std::vector<uint8_t>>>> rows;
    for (size_t i = 0; i < n; ++i) {
      rows.push_back({c.indices[i],
                      {c.labels[i], std::vector<uint8_t>(c.images.begin() + i * bytes,
                                                         c.images.begin() + (i + 1) * bytes)}});
    }
    std::sort(rows.begin(), rows.end());
    return rows;
  };
  REQUIRE(second.indices.size() == kSamples);
  CHECK(by_index(second) == by_index(first));
  CHECK(by_index(first) == by_index(plain));
  // Same epoch, same order: the batches themselves are identical.
  auto [again, again_stats] = run(cached, 0);
  CHECK(again_stats.output_cache_hits == kSamples);
  CHECK(again.images == first.images);
  CHECK(again.labels == first.labels);
  CHECK(again.indices == first.indices);
}

TEST_CASE(
    "with the node cache below it, output outlives the daemon: a new cache over the same "
    "folder decodes nothing",
    "[output_cache][engine][object_cache]") {
  TempDir dir;
  TempDir node_cache;
  constexpr int kSamples = 10;
  MakeImageFolder(dir.path(), 2, kSamples / 2);
  auto base = MakePipeline(dir.path(), 24);
  base->transform.mode = AugmentMode::kEval;
  base->transform.resize_size = 28;
  base->cache_output = true;
  remote::CacheOptions co;
  co.dir = node_cache.path();
  co.max_bytes = 64 << 20;
  // A pipeline as a daemon with a `cache` section builds it: its output
  // cache (1 byte of memory: nothing is kept there) over the node cache.
  auto pipeline_over_node_cache = [&](std::shared_ptr<remote::ObjectCache> node) {
    auto p = std::make_shared<PipelineConfig>(*base);
    p->output_cache =
        std::make_shared<OutputCache>(1, std::make_shared<remote::CachedOutputStore>(node));
    REQUIRE(ValidatePipelineConfig(*p).ok());
    return p;
  };
  std::atomic<int> decodes{0};
  EngineOptions eo;
  eo.decoder_factory = [&decodes] { return std::make_unique<CountingDecoder>(&decodes); };
  auto engine = MakeEngine(2, eo);
  StreamOptions so;
  so.batch_size = 5;
  so.seed = 3;
  auto run = [&](const std::shared_ptr<const PipelineConfig>& p) {
    auto s = engine->OpenStream(p, so);
    REQUIRE(s.ok());
    Collected c = Drain(**s);
    REQUIRE(c.end.ok());
    return c;
  };

  Collected first;
  {
    auto node = remote::ObjectCache::Open(co);
    REQUIRE(node.ok());
    auto p = pipeline_over_node_cache(*node);
    first = run(p);
    CHECK(decodes.load() == kSamples);
    CHECK(p->output_cache->GetStats().entries == 0);  // not in memory: on disk
    CHECK((*node)->counters().entries == kSamples);
  }
  // "Restarted": the folder opened again, a new output cache.
  decodes = 0;
  auto node = remote::ObjectCache::Open(co);
  REQUIRE(node.ok());
  CHECK((*node)->counters().entries == kSamples);
  auto p = pipeline_over_node_cache(*node);
  const Collected again = run(p);
  CHECK(decodes.load() == 0);
  const OutputCache::Stats st = p->output_cache->GetStats();
  CHECK(st.hits == kSamples);
  CHECK(st.store_hits == kSamples);
  CHECK(again.images == first.images);
  CHECK(again.labels == first.labels);
  CHECK(again.indices == first.indices);
  // Another transform keys other entries: decoded, not served.
  auto other = std::make_shared<PipelineConfig>(*p);
  other->transform.resize_size = 32;
  other->output_cache =
      std::make_shared<OutputCache>(1, std::make_shared<remote::CachedOutputStore>(*node));
  REQUIRE(ValidatePipelineConfig(*other).ok());
  run(other);
  CHECK(decodes.load() == kSamples);
}

TEST_CASE("a changed file or transform is not served from the cache", "[output_cache][engine]") {
  TempDir dir;
  MakeImageFolder(dir.path(), 1, 3);
  auto p = MakePipeline(dir.path(), 16);
  p->transform.mode = AugmentMode::kEval;
  p->transform.resize_size = 20;
  p->cache_output = true;
  p->output_cache = std::make_shared<OutputCache>(64 << 20);
  REQUIRE(ValidatePipelineConfig(*p).ok());
  std::atomic<int> decodes{0};
  EngineOptions eo;
  eo.decoder_factory = [&decodes] { return std::make_unique<CountingDecoder>(&decodes); };
  auto engine = MakeEngine(1, eo);
  StreamOptions so;
  so.batch_size = 3;
  so.shuffle = false;
  auto run = [&](const std::shared_ptr<const PipelineConfig>& pc, StreamOptions o) {
    auto s = engine->OpenStream(pc, o);
    REQUIRE(s.ok());
    Collected c = Drain(**s);
    REQUIRE(c.end.ok());
    return c;
  };
  run(p, so);
  REQUIRE(decodes.load() == 3);
  run(p, so);
  CHECK(decodes.load() == 3);  // all hits

  // A file rewritten (other bytes, other size and mtime) is decoded again.
  testing::WriteFile(std::filesystem::path(dir.path()) / "class_0" / "img_1001.jpg",
                     testing::EncodeNoiseJpeg(50, 40, 77));
  const Collected after = run(p, so);
  CHECK(decodes.load() == 4);

  // The same cache under another transform (as after a reload): all miss.
  auto nhwc = std::make_shared<PipelineConfig>(*p);
  nhwc->transform.layout = Layout::kNHWC;
  run(nhwc, so);
  CHECK(decodes.load() == 7);
  auto f32 = std::make_shared<PipelineConfig>(*p);
  f32->transform.dtype = DType::kFloat32;
  run(f32, so);
  CHECK(decodes.load() == 10);
  // Keys follow what a stream writes: a float32 pipeline collated to uint8
  // (collate_uint8) writes what the uint8 pipeline wrote, and is served it.
  StreamOptions u8 = so;
  u8.collate_uint8 = true;
  const Collected as_u8 = run(f32, u8);
  CHECK(decodes.load() == 10);
  CHECK(as_u8.images == after.images);
}

}  // namespace
}  // namespace conveyor
