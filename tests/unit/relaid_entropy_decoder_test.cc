// The re-laid copy's entropy decoder (core/decode/relaid_entropy_decoder.h):
// a region decoded with it, straight from the copy's restart intervals,
// equals the region decoded by libjpeg from the original file, for every
// subsampling, progressive and CMYK originals, every DCT scale, and regions
// whose edges lie on and beside MCU boundaries; it decodes only the MCUs of
// the columns libjpeg transforms in the rows it reads; scans it does not
// handle go to libjpeg's decoder; corrupt intervals give an error naming
// them, never a crash.
#include "core/decode/relaid_entropy_decoder.h"

#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/jpeg_relayout.h"
#include "tests/unit/relaid_jpeg_cases.h"

namespace conveyor {
namespace {

using testing::Case;
using testing::Decode;
using testing::kCases;
using testing::Make;
using testing::Scaled;

struct Copy {
  std::vector<uint8_t> bytes;
  RelaidLayout layout;
  McuIntervals intervals() const { return McuIntervals{layout.starts, layout.ends}; }
};

Copy Relay(const std::vector<uint8_t>& original) {
  absl::StatusOr<std::vector<uint8_t>> relaid = RelayJpeg(original);
  INFO(relaid.status().ToString());
  REQUIRE(relaid.ok());
  Copy c;
  c.bytes = std::move(*relaid);
  absl::StatusOr<RelaidLayout> layout = ParseRelaid(c.bytes);
  INFO(layout.status().ToString());
  REQUIRE(layout.ok());
  c.layout = std::move(*layout);
  return c;
}

TEST_CASE("regions decoded from a copy's intervals equal the original's", "[relaid_decoder]") {
  Rng rng(4242);
  for (const Case& c : kCases) {
    for (const auto& [w, h] : std::vector<std::pair<int, int>>{{331, 247}, {64, 48}, {17, 9}}) {
      CAPTURE(c.name, w, h);
      const std::vector<uint8_t> original = Make(c, w, h, static_cast<uint64_t>(w + h));
      const Copy copy = Relay(original);
      const McuIntervals intervals = copy.intervals();
      const int mw = copy.layout.mcu_width, mh = copy.layout.mcu_height;
      for (int trial = 0; trial < 40; ++trial) {
        const int denom = 1 << rng.Below(4);
        const int sw = Scaled(w, denom), sh = Scaled(h, denom);
        const int smw = mw / denom, smh = mh / denom;
        // Half the regions random, half with edges on or beside an MCU
        // boundary.
        auto edge = [&](int limit, int mcu) {
          if (trial % 2 == 0 || limit <= mcu) {
            return static_cast<int>(rng.Below(static_cast<uint64_t>(limit)));
          }
          const int k = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(limit / mcu)));
          return std::clamp(k * mcu + static_cast<int>(rng.Below(3)) - 1, 0, limit - 1);
        };
        PixelRegion region;
        region.x0 = edge(sw, smw);
        region.y0 = edge(sh, smh);
        region.x1 = std::min(sw, region.x0 + 1 + edge(sw - region.x0, smw));
        region.y1 = std::min(sh, region.y0 + 1 + edge(sh - region.y0, smh));
        CAPTURE(trial, denom, region.x0, region.y0, region.x1, region.y1);
        uint64_t decoded = 0;
        CHECK(Decode(copy.bytes, region, denom, &intervals, &decoded) ==
              Decode(original, region, denom));
        CHECK(decoded > 0);  // the copy's decoder ran
        CHECK(decoded <= copy.layout.starts.size());
      }
    }
  }
}

TEST_CASE("only the MCUs of the crop's columns in the rows read are decoded", "[relaid_decoder]") {
  const Case c{"4:2:0", 3, 2, 2, false};
  const std::vector<uint8_t> original = Make(c, 640, 480, 5);
  const Copy copy = Relay(original);
  const McuIntervals intervals = copy.intervals();
  REQUIRE(copy.layout.mcus_per_row == 40);
  REQUIRE(copy.layout.mcu_rows == 30);
  // Columns 200..299, rows 160..239: libjpeg transforms the MCU columns of
  // [199, 301) (JpegDecoder's one pixel of margin), 12..18, and reads MCU
  // rows 9..15: the crop's, the one above (jpeg_skip_scanlines reads the
  // last row it skips, for the upsampler's context) and the one below.
  const PixelRegion region{200, 160, 300, 240};
  uint64_t decoded = 0;
  CHECK(Decode(copy.bytes, region, 1, &intervals, &decoded) == Decode(original, region, 1));
  CHECK(decoded == 7u * 7u);  // of 40 × 30
  // The whole image decodes every MCU once.
  const PixelRegion all{0, 0, 640, 480};
  CHECK(Decode(copy.bytes, all, 1, &intervals, &decoded) == Decode(original, all, 1));
  CHECK(decoded == 40u * 30u);
}

TEST_CASE("scans the copy's decoder does not handle go to libjpeg's", "[relaid_decoder]") {
  const Case c{"4:2:0", 3, 2, 2, false};
  const std::vector<uint8_t> original = Make(c, 200, 120, 9);
  // A file with no restart markers (one interval: the whole scan).
  const std::vector<uint32_t> starts{0}, ends{0};
  const McuIntervals one{starts, ends};
  const PixelRegion region{10, 10, 150, 100};
  uint64_t decoded = 7;
  CHECK(Decode(original, region, 1, &one, &decoded) == Decode(original, region, 1));
  CHECK(decoded == 0);
  // A copy whose interval list does not match its MCUs.
  const Copy copy = Relay(original);
  const std::vector<uint32_t> fewer(copy.layout.starts.begin(), copy.layout.starts.end() - 1);
  const McuIntervals short_list{fewer, fewer};
  CHECK(Decode(copy.bytes, region, 1, &short_list, &decoded) == Decode(original, region, 1));
  CHECK(decoded == 0);
}

TEST_CASE("corrupt intervals are an error naming the data, never a crash", "[relaid_decoder]") {
  const Case c{"4:2:2", 3, 2, 1, false};
  const std::vector<uint8_t> original = Make(c, 160, 96, 13);
  const Copy copy = Relay(original);
  const McuIntervals intervals = copy.intervals();
  Rng rng(77);
  int errors = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> bad = copy.bytes;
    // Scribble over a few bytes of the entropy-coded data (markers and
    // stuffing included: the intervals stay where the layout says).
    for (int i = 0; i < 4; ++i) {
      const size_t at =
          copy.layout.scan_offset + rng.Below(copy.layout.ends.back() - copy.layout.scan_offset);
      bad[at] = static_cast<uint8_t>(rng.Below(256));
    }
    JpegDecoder d;
    REQUIRE(d.ReadHeader(bad, 64u << 20).ok());
    const absl::Status st = d.DecodeRegion(
        PixelRegion{0, 0, 160, 96}, 1, [](const uint8_t*, size_t, int) {}, &intervals);
    if (!st.ok()) {
      ++errors;
      CHECK(absl::IsDataLoss(st));
      CHECK(st.message().find("corrupt JPEG data") != std::string::npos);
    }
  }
  CHECK(errors > 0);
  // Intervals that point past their data: an error, not a read past it.
  std::vector<uint32_t> starts(copy.layout.starts), ends(copy.layout.ends);
  for (size_t i = 0; i < starts.size(); ++i) ends[i] = starts[i];  // empty intervals
  const McuIntervals empty{starts, ends};
  JpegDecoder d;
  REQUIRE(d.ReadHeader(copy.bytes, 64u << 20).ok());
  const absl::Status st = d.DecodeRegion(
      PixelRegion{0, 0, 160, 96}, 1, [](const uint8_t*, size_t, int) {}, &empty);
  CHECK(absl::IsDataLoss(st));
}

}  // namespace
}  // namespace conveyor
