// Tests of the front- and rear-coded string list (core/data/front_coded_paths.h):
// exact round trip of every string in any access order, whatever bytes the
// strings hold, and the size it reaches on ImageNet-like paths.
#include "core/data/front_coded_paths.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace conveyor {
namespace {

FrontCodedPaths Build(const std::vector<std::string>& strings) {
  FrontCodedPaths::Builder b;
  for (const std::string& s : strings) b.Add(s);
  REQUIRE(b.size() == strings.size());
  return b.Finish();
}

// Every string, in order and then in a shuffled order through one reused
// buffer (so a longer string left in it from another block must not leak).
void CheckRoundTrip(const std::vector<std::string>& strings) {
  const FrontCodedPaths paths = Build(strings);
  REQUIRE(paths.size() == strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    INFO("string " << i);
    REQUIRE(paths.Get(i) == strings[i]);
  }
  std::vector<size_t> order(strings.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  std::string buffer(300, 'Z');
  for (const size_t i : order) {
    INFO("string " << i << " (shuffled order)");
    paths.Get(i, &buffer);
    REQUIRE(buffer == strings[i]);
  }
}

// ImageNet-like paths: class-sorted, image ids random within a class.
std::vector<std::string> ImageNetLike(size_t n, size_t classes) {
  std::mt19937_64 rng(2012);
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t c = i * classes / n;
    const std::string wnid = "n0" + std::to_string(1440764 + c * 7919);
    out.push_back(wnid + "/" + wnid + "_" + std::to_string(1 + rng() % 60000) + ".JPEG");
  }
  return out;
}

TEST_CASE("FrontCodedPaths: ImageNet-like paths round trip exactly", "[dataset][front_coded]") {
  CheckRoundTrip(ImageNetLike(5000, 10));
}

TEST_CASE("FrontCodedPaths: any bytes and any lengths round trip exactly",
          "[dataset][front_coded]") {
  std::vector<std::string> s = {
      "a",
      "ab",
      "a",  // a prefix of the one before
      "aa",
      "aaa",  // shared head and tail could overlap: they must not
      "aaa",  // identical to the one before
      "",
      "x",
      std::string("nul\0inside", 10),
      std::string("nul\0inside\0", 11),
      "new\nline\ttab\rreturn",
      "\xff\xfe\x80 high bytes \xc3\xa9",
      "\xff\xfe\x81 high bytes \xc3\xa9",
      std::string(200, '\xff'),  // lengths of 2-byte varints
      std::string(200, '\xff') + "tail",
      std::string(20000, 'q'),  // a 3-byte varint
      std::string(19999, 'q') + "r",
      "short again",
  };
  // Across block boundaries: 3 blocks and a bit.
  for (int i = 0; i < 40; ++i) {
    s.push_back("dir/" + std::string(1, static_cast<char>(i * 6)) + "/f");
  }
  CheckRoundTrip(s);
  CheckRoundTrip({"only one"});
  CheckRoundTrip({std::string(1, '\0')});
}

TEST_CASE("FrontCodedPaths: random strings round trip exactly", "[dataset][front_coded]") {
  std::mt19937_64 rng(99);
  std::vector<std::string> s;
  std::string previous;
  for (int i = 0; i < 3000; ++i) {
    // Mostly derived from the one before (edits at the front, middle, end),
    // sometimes fresh; bytes from the whole 0..255 range.
    std::string next = rng() % 5 == 0 ? std::string() : previous;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = next.empty() ? 0 : rng() % (next.size() + 1);
      if (rng() % 3 == 0 && !next.empty() && at < next.size()) {
        next.erase(at, 1 + rng() % (next.size() - at));
      } else {
        next.insert(at, std::string(1 + rng() % 6, static_cast<char>(rng() % 256)));
      }
    }
    s.push_back(next);
    previous = next;
  }
  CheckRoundTrip(s);
}

TEST_CASE("FrontCodedPaths: ImageNet-like paths take a third of their bytes or less",
          "[dataset][front_coded]") {
  const std::vector<std::string> s = ImageNetLike(100000, 100);
  size_t plain = 0;
  for (const std::string& p : s) plain += p.size();
  const FrontCodedPaths paths = Build(s);
  INFO("plain " << plain << " bytes, coded " << paths.MemoryBytes() << " bytes");
  CHECK(paths.MemoryBytes() * 3 <= plain);
}

TEST_CASE("FrontCodedPaths: unrelated strings cost little more than their bytes",
          "[dataset][front_coded]") {
  std::mt19937_64 rng(5);
  std::vector<std::string> s;
  size_t plain = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string x(10 + rng() % 20, ' ');
    for (char& c : x) c = static_cast<char>('a' + rng() % 26);
    plain += x.size();
    s.push_back(std::move(x));
  }
  const FrontCodedPaths paths = Build(s);
  INFO("plain " << plain << " bytes, coded " << paths.MemoryBytes() << " bytes");
  CHECK(paths.MemoryBytes() <= plain + s.size() * 4 + 1024);
}

TEST_CASE("FrontCodedPaths: the builder starts over after Finish", "[dataset][front_coded]") {
  FrontCodedPaths::Builder b;
  b.Add("one/a");
  b.Add("one/b");
  const FrontCodedPaths first = b.Finish();
  CHECK(b.size() == 0);
  b.Add("two/c");
  const FrontCodedPaths second = b.Finish();
  REQUIRE(first.size() == 2);
  REQUIRE(second.size() == 1);
  CHECK(first.Get(1) == "one/b");
  CHECK(second.Get(0) == "two/c");
}

}  // namespace
}  // namespace conveyor
