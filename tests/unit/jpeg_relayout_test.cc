// JPEG re-laying (core/decode/jpeg_relayout.h): the re-laid copy decodes to
// the original's pixels, and any region decoded from the smaller JPEG of the
// restart intervals it covers equals the same region decoded from the
// original — over sizes that are not whole MCUs, subsamplings 4:2:0, 4:2:2,
// 4:4:4 and 4:4:0, greyscale, progressive and CMYK files, and every DCT
// scale; files that cannot be re-laid are refused with a clear error.
#include "core/decode/jpeg_relayout.h"

#include <jpeglib.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "tests/unit/relaid_jpeg_cases.h"
#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

using testing::Case;
using testing::Decode;
using testing::kCases;
using testing::Make;
using testing::Pixels;
using testing::Scaled;

TEST_CASE("a re-laid JPEG decodes to the original's pixels", "[jpeg_relayout]") {
  for (const Case& c : kCases) {
    for (const auto& [w, h] : std::vector<std::pair<int, int>>{{203, 151}, {64, 48}, {17, 9}}) {
      CAPTURE(c.name, w, h);
      const std::vector<uint8_t> original = Make(c, w, h, static_cast<uint64_t>(w * h));
      absl::StatusOr<std::vector<uint8_t>> relaid = RelayJpeg(original);
      INFO(relaid.status().ToString());
      REQUIRE(relaid.ok());
      absl::StatusOr<RelaidLayout> layout = ParseRelaid(*relaid);
      INFO(layout.status().ToString());
      REQUIRE(layout.ok());
      CHECK(layout->width == w);
      CHECK(layout->height == h);
      CHECK(layout->mcus_per_row % layout->interval_mcus == 0);
      CHECK(layout->interval_mcus <= kMaxRelayIntervalMcus);
      for (int denom : {1, 2, 4, 8}) {
        const PixelRegion all{0, 0, Scaled(w, denom), Scaled(h, denom)};
        CHECK(Decode(*relaid, all, denom) == Decode(original, all, denom));
      }
    }
  }
}

TEST_CASE("a region decoded from its restart intervals equals the original's", "[jpeg_relayout]") {
  Rng rng(2026);
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const int w = 331, h = 247;  // not whole MCUs either way
    const std::vector<uint8_t> original = Make(c, w, h, 7);
    absl::StatusOr<std::vector<uint8_t>> relaid = RelayJpeg(original);
    REQUIRE(relaid.ok());
    absl::StatusOr<RelaidLayout> layout = ParseRelaid(*relaid);
    REQUIRE(layout.ok());
    std::vector<uint8_t> part;
    for (int trial = 0; trial < 60; ++trial) {
      const int denom = 1 << rng.Below(4);
      const int sw = Scaled(w, denom), sh = Scaled(h, denom);
      PixelRegion region;
      region.x0 = static_cast<int>(rng.Below(static_cast<uint64_t>(sw)));
      region.y0 = static_cast<int>(rng.Below(static_cast<uint64_t>(sh)));
      region.x1 =
          region.x0 + 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(sw - region.x0)));
      region.y1 =
          region.y0 + 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(sh - region.y0)));
      CAPTURE(trial, denom, region.x0, region.y0, region.x1, region.y1);
      int ox = 0, oy = 0;
      const McuRect rect = RectForRegion(*layout, region, denom, &ox, &oy);
      REQUIRE(ExtractMcuRect(*relaid, *layout, rect, &part).ok());
      const PixelRegion shifted{region.x0 - ox, region.y0 - oy, region.x1 - ox, region.y1 - oy};
      CHECK(Decode(part, shifted, denom) == Decode(original, region, denom));
      // The smaller JPEG holds only what the rectangle covers.
      if (rect.col1 - rect.col0 < layout->mcus_per_row / 2 &&
          rect.row1 - rect.row0 < layout->mcu_rows / 2) {
        CHECK(part.size() < relaid->size() / 2);
      }
    }
  }
}

TEST_CASE("regions whose edges lie on or beside MCU boundaries decode as from the original",
          "[jpeg_relayout]") {
  // The rectangle keeps only the pixel beside the region, so the edges
  // where an upsampler's neighbour falls in the next MCU are the ones to
  // pin: on a boundary, one pixel either side of it, and regions one to
  // three pixels across (libjpeg's upsampler choice depends on the width).
  Rng rng(29);
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const int w = 331, h = 247;
    const std::vector<uint8_t> original = Make(c, w, h, 11);
    absl::StatusOr<std::vector<uint8_t>> relaid = RelayJpeg(original);
    REQUIRE(relaid.ok());
    absl::StatusOr<RelaidLayout> layout = ParseRelaid(*relaid);
    REQUIRE(layout.ok());
    std::vector<uint8_t> part;
    for (int denom : {1, 2, 4, 8}) {
      const int sw = Scaled(w, denom), sh = Scaled(h, denom);
      const int mw = layout->mcu_width / denom, mh = layout->mcu_height / denom;
      // Near a boundary: k MCUs in, shifted by -1, 0 or +1 pixel.
      auto near = [&](int mcu_size, int limit) {
        const int k = 1 + static_cast<int>(rng.Below(static_cast<uint64_t>(limit / mcu_size - 1)));
        return std::clamp(k * mcu_size + static_cast<int>(rng.Below(3)) - 1, 0, limit - 1);
      };
      for (int trial = 0; trial < 24; ++trial) {
        PixelRegion region;
        region.x0 = trial % 4 == 0 ? 0 : near(mw, sw);
        region.y0 = trial % 5 == 0 ? 0 : near(mh, sh);
        if (trial % 3 == 0) {  // narrow
          region.x1 = std::min(sw, region.x0 + 1 + static_cast<int>(rng.Below(3)));
          region.y1 = std::min(sh, region.y0 + 1 + static_cast<int>(rng.Below(3)));
        } else {
          region.x1 = trial % 7 == 0 ? sw : std::max(region.x0 + 1, near(mw, sw));
          region.y1 = trial % 6 == 0 ? sh : std::max(region.y0 + 1, near(mh, sh));
          if (region.x1 <= region.x0) region.x1 = std::min(sw, region.x0 + 1);
          if (region.y1 <= region.y0) region.y1 = std::min(sh, region.y0 + 1);
        }
        CAPTURE(denom, trial, region.x0, region.y0, region.x1, region.y1);
        int ox = 0, oy = 0;
        const McuRect rect = RectForRegion(*layout, region, denom, &ox, &oy);
        // Only the MCUs of the region and its neighbouring pixel (and, for
        // narrow regions, the minimum width).
        CHECK(rect.row0 == std::max(0, region.y0 - 1) / mh);
        CHECK(rect.row1 == std::min(layout->mcu_rows, (region.y1 + mh) / mh));
        CHECK(rect.col1 - rect.col0 >= std::min(kMinRectColumns, layout->mcus_per_row));
        REQUIRE(ExtractMcuRect(*relaid, *layout, rect, &part).ok());
        const PixelRegion shifted{region.x0 - ox, region.y0 - oy, region.x1 - ox, region.y1 - oy};
        CHECK(Decode(part, shifted, denom) == Decode(original, region, denom));
      }
    }
  }
}

TEST_CASE("the re-laid layout names its restart intervals", "[jpeg_relayout]") {
  const Case c{"4:2:0", 3, 2, 2, false};
  const std::vector<uint8_t> original = Make(c, 320, 64, 3);  // 20×4 MCUs
  const RelaidLayout relaid = *ParseRelaid(*RelayJpeg(original));
  CHECK(relaid.mcu_width == 16);
  CHECK(relaid.mcu_height == 16);
  CHECK(relaid.mcus_per_row == 20);
  CHECK(relaid.mcu_rows == 4);
  CHECK(relaid.interval_mcus == kMaxRelayIntervalMcus);
  CHECK(relaid.starts.size() == 80u / kMaxRelayIntervalMcus);

  // Restart markers out of their order (RST0..7 in turn), missing or cut
  // off: not a layout to decode intervals of.
  std::vector<uint8_t> copy = *RelayJpeg(original);
  const size_t first = relaid.ends[0], second = relaid.ends[1];
  REQUIRE(copy[first + 1] == 0xD0);
  std::vector<uint8_t> swapped = copy;
  std::swap(swapped[first + 1], swapped[second + 1]);
  absl::StatusOr<RelaidLayout> bad = ParseRelaid(swapped);
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK(bad.status().message().find("restart marker 1 where 0 was due") != std::string::npos);
  std::vector<uint8_t> missing = copy;
  missing.erase(missing.begin() + static_cast<ptrdiff_t>(first),
                missing.begin() + static_cast<ptrdiff_t>(first) + 2);
  CHECK(absl::IsInvalidArgument(ParseRelaid(missing).status()));
  std::vector<uint8_t> cut(copy.begin(), copy.begin() + static_cast<ptrdiff_t>(second));
  cut.push_back(0xFF);
  cut.push_back(0xD9);
  bad = ParseRelaid(cut);
  CHECK(bad.status().message().find("restart intervals, expected 80") != std::string::npos);

  // Any baseline JPEG whose restart intervals tile its rows has such a
  // layout: here intervals of 4 MCUs, written by the encoder itself.
  const std::vector<uint8_t> by_4 =
      testing::CompressJpeg(Pixels(320, 64, 3, 3), 320, 64, 3, 85,
                            [](jpeg_compress_struct* cinfo) { cinfo->restart_interval = 4; });
  const RelaidLayout l = *ParseRelaid(by_4);
  CHECK(l.interval_mcus == 4);
  CHECK(l.starts.size() == 20);
  // Columns must be whole intervals.
  std::vector<uint8_t> out;
  CHECK(absl::IsInvalidArgument(ExtractMcuRect(by_4, l, McuRect{1, 4, 0, 1}, &out)));
  CHECK(absl::IsInvalidArgument(ExtractMcuRect(by_4, l, McuRect{0, 4, 2, 2}, &out)));
  CHECK(absl::IsInvalidArgument(ExtractMcuRect(by_4, l, McuRect{0, 24, 0, 1}, &out)));
  REQUIRE(ExtractMcuRect(by_4, l, McuRect{4, 8, 1, 3}, &out).ok());
  JpegDecoder d;
  const absl::StatusOr<JpegHeader> header = d.ReadHeader(out, 1u << 20);
  REQUIRE(header.ok());
  CHECK(header->width == 64);
  CHECK(header->height == 32);
  CHECK_FALSE(header->progressive);
  // Its pixels are the original's MCUs [4, 8) × [1, 3).
  CHECK(Decode(out, PixelRegion{16, 16, 48, 16 + 8}, 1) ==
        Decode(by_4, PixelRegion{64 + 16, 16 + 16, 64 + 48, 16 + 16 + 8}, 1));
}

TEST_CASE("what cannot be re-laid is refused, naming why", "[jpeg_relayout]") {
  const std::vector<uint8_t> not_jpeg = {'P', 'N', 'G', 0, 1, 2, 3};
  CHECK(absl::IsInvalidArgument(RelayJpeg(not_jpeg).status()));
  std::vector<uint8_t> truncated = Make(kCases[0], 96, 96, 5);
  truncated.resize(truncated.size() / 2);
  const absl::Status st = RelayJpeg(truncated).status();
  CHECK(absl::IsInvalidArgument(st));
  CHECK_THAT(std::string(st.message()), Catch::Contains("cannot re-lay JPEG"));
  const std::vector<uint8_t> arithmetic =
      testing::CompressJpeg(Pixels(32, 32, 3, 1), 32, 32, 3, 85,
                            [](jpeg_compress_struct* cinfo) { cinfo->arith_code = TRUE; });
  const absl::Status arith = RelayJpeg(arithmetic).status();
  CHECK(absl::IsUnimplemented(arith));
  CHECK_THAT(std::string(arith.message()), Catch::Contains("arithmetic"));
  // A plain JPEG without restart markers is no re-laid one.
  CHECK(absl::IsInvalidArgument(ParseRelaid(Make(kCases[0], 96, 96, 5)).status()));
}

TEST_CASE("the transformer's output from a re-laid copy is the original's, byte for byte",
          "[jpeg_relayout]") {
  for (const Case& c : kCases) {
    CAPTURE(c.name);
    const std::vector<uint8_t> original = Make(c, 500, 375, 11);  // ImageNet's typical size
    const std::vector<uint8_t> relaid = *RelayJpeg(original);
    for (const AugmentMode mode : {AugmentMode::kTrain, AugmentMode::kEval}) {
      for (const DType dtype : {DType::kUint8, DType::kFloat32}) {
        TransformSpec spec;
        spec.mode = mode;
        spec.dtype = dtype;
        spec.output_width = spec.output_height = 64;
        REQUIRE(ValidateTransformSpec(spec).ok());
        SampleTransformer a, b;
        std::vector<uint8_t> out_a(SampleBytes(spec)), out_b(SampleBytes(spec));
        int from_intervals = 0;
        for (uint64_t i = 0; i < 24; ++i) {
          Rng ra = Rng::ForKeys(5, 1, i), rb = Rng::ForKeys(5, 1, i);
          REQUIRE(a.Run(original, spec, ra, out_a.data()).ok());
          REQUIRE(b.Run(relaid, spec, rb, out_b.data()).ok());
          CHECK_FALSE(a.last().from_intervals);
          from_intervals += b.last().from_intervals ? 1 : 0;
          CHECK(out_a == out_b);
        }
        // Train crops are mostly smaller than the image; eval's centre window
        // leaves the sides out.
        CHECK(from_intervals > 12);
      }
    }
  }
}

}  // namespace
}  // namespace conveyor
