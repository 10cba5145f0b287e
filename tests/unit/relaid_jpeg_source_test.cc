// RelaidJpegSource and its Relayer (remote/relaid_jpeg_source.h) over real
// files and a real object cache folder: a first read serves the original and
// has a copy made; later reads serve the copy, which decodes to the same
// output; a changed file is served as it now is, never from the old copy;
// a file that cannot be re-laid is tried once.
#include "remote/relaid_jpeg_source.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "core/decode/jpeg_relayout.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "temp_dir.h"
#include "test_images.h"

namespace conveyor::remote {
namespace {

std::vector<uint8_t> ReadAll(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> Transform(const std::vector<uint8_t>& bytes) {
  TransformSpec spec;
  spec.output_width = spec.output_height = 32;
  SampleTransformer t;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng = Rng::ForKeys(1, 2, 3);
  REQUIRE(t.Run(bytes, spec, rng, out.data()).ok());
  return out;
}

struct Fixture {
  testing::TempDir data, cache_dir;
  std::shared_ptr<const DatasetIndex> index;
  std::shared_ptr<ObjectCache> cache;
  std::shared_ptr<Relayer> relayer;
  std::unique_ptr<RelaidJpegSource> source;

  Fixture() {
    testing::MakeImageFolder(std::filesystem::path(data.path()), 1, 3, 200, 150);
    auto i = DatasetIndex::LoadImageFolder(data.path());
    REQUIRE(i.ok());
    index = *i;
    CacheOptions o;
    o.dir = cache_dir.path() + "/cache";
    o.max_bytes = 64u << 20;
    auto c = ObjectCache::Open(o);
    REQUIRE(c.ok());
    cache = *c;
    relayer = std::make_shared<Relayer>(cache);
    source = std::make_unique<RelaidJpegSource>(
        std::make_shared<FileSampleSource>(index, 16u << 20), cache, relayer, index->size());
  }
  std::filesystem::path File(uint64_t i) const { return index->FullPath(i); }
};

TEST_CASE("a re-laid copy is made after the first read and served after it", "[relaid_jpeg]") {
  Fixture f;
  const std::vector<uint8_t> original = ReadAll(f.File(0));
  std::vector<uint8_t> got;
  REQUIRE(f.source->Read(0, &got).ok());
  CHECK(got == original);  // served as it is while no copy exists
  f.relayer->Drain();
  CHECK(f.relayer->counters().made == 1);
  REQUIRE(f.source->Read(0, &got).ok());
  CHECK(got != original);
  CHECK(ParseRelaid(got).ok());
  CHECK(Transform(got) == Transform(original));
  CHECK(f.cache->counters().hits == 1);
  // The copy is not offered again.
  CHECK(f.relayer->counters().offered == 1);
  // Identity is the file's, so output cached under it serves either.
  std::string a, b;
  CHECK(f.source->Identity(0, &a));
  CHECK(FileSampleSource(f.index, 16u << 20).Identity(0, &b));
  CHECK(a == b);
}

TEST_CASE("a changed file is served as it now is, never from its old copy", "[relaid_jpeg]") {
  Fixture f;
  std::vector<uint8_t> got;
  REQUIRE(f.source->Read(1, &got).ok());
  f.relayer->Drain();
  REQUIRE(f.relayer->counters().made == 1);
  // Replaced by another image (new size, mtime and inode).
  const std::vector<uint8_t> replacement = testing::EncodeNoiseJpeg(120, 90, 99);
  const std::filesystem::path tmp = f.File(1).string() + ".new";
  testing::WriteFile(tmp, replacement);
  std::filesystem::rename(tmp, f.File(1));
  REQUIRE(f.source->Read(1, &got).ok());
  CHECK(got == replacement);
  f.relayer->Drain();
  REQUIRE(f.source->Read(1, &got).ok());
  CHECK(ParseRelaid(got).ok());
  CHECK(Transform(got) == Transform(replacement));
}

TEST_CASE("a damaged copy is not served: the original is, and it is re-laid", "[relaid_jpeg]") {
  Fixture f;
  const std::vector<uint8_t> original = ReadAll(f.File(2));
  std::vector<uint8_t> got;
  REQUIRE(f.source->Read(2, &got).ok());
  f.relayer->Drain();
  REQUIRE(f.relayer->counters().made == 1);
  // The copy on disk loses its last restart intervals (a torn write after
  // the cache's checks): it still ends the image, but its intervals no
  // longer make the MCU count.
  std::string id;
  REQUIRE(f.source->Identity(2, &id));
  const std::string key = RelaidKey(id);
  std::vector<uint8_t> copy;
  REQUIRE(f.cache->Get(key, *f.cache->ValidatorsOf(key), &copy));
  std::vector<uint8_t> damaged(copy.begin(), copy.end() - 300);
  damaged.push_back(0xFF);
  damaged.push_back(0xD9);
  REQUIRE(!ParseRelaid(damaged).ok());
  f.cache->Put(key, RelaidValidators(damaged.size()), damaged);
  // Served: the original, not the damaged copy; and offered again.
  REQUIRE(f.source->Read(2, &got).ok());
  CHECK(got == original);
  CHECK(f.source->damaged_copies() == 1);
  CHECK(f.relayer->counters().offered == 2);
  f.relayer->Drain();
  // The new copy replaced it, and is served from then on.
  REQUIRE(f.source->Read(2, &got).ok());
  CHECK(got != original);
  CHECK(ParseRelaid(got).ok());
  CHECK(Transform(got) == Transform(original));
  CHECK(f.source->damaged_copies() == 1);
}

TEST_CASE("a JPEG that cannot be re-laid is served as it is and tried once", "[relaid_jpeg]") {
  Fixture f;
  std::vector<uint8_t> broken = ReadAll(f.File(2));
  broken.resize(broken.size() / 2);  // truncated: libjpeg warns, so it is refused
  testing::WriteFile(f.File(2), broken);
  std::vector<uint8_t> got;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(f.source->Read(2, &got).ok());
    CHECK(got == broken);
    f.relayer->Drain();
  }
  const Relayer::Counters c = f.relayer->counters();
  CHECK(c.offered == 1);
  CHECK(c.refused == 1);
  CHECK(c.made == 0);
}

}  // namespace
}  // namespace conveyor::remote
