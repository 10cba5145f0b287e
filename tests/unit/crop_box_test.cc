// Crop boxes: torchvision's RandomResizedCrop rules (bounds, area and aspect
// limits, centre fallback, determinism) and the eval Resize + CenterCrop window.
#include "core/decode/crop_box.h"

#include <cmath>

#include <catch2/catch.hpp>

#include "core/decode/sample_transformer.h"

namespace conveyor {

TEST_CASE("crop box: random crops stay inside and obey scale and ratio", "[crop]") {
  TransformSpec spec;
  int fallbacks = 0, total = 0;
  for (auto [w, h] : {std::pair{500, 375}, std::pair{375, 500}, std::pair{224, 224},
                      std::pair{1, 1}, std::pair{3000, 2000}, std::pair{33, 7}}) {
    for (uint64_t i = 0; i < 2000; ++i) {
      Rng rng = Rng::ForKeys(1, 2, i);
      bool fallback = true;
      const CropBox b = RandomResizedCropBox(w, h, spec, rng, &fallback);
      ++total;
      REQUIRE(b.width > 0);
      REQUIRE(b.height > 0);
      REQUIRE(b.left >= 0);
      REQUIRE(b.top >= 0);
      REQUIRE(b.left + b.width <= w);
      REQUIRE(b.top + b.height <= h);
      if (fallback) {
        ++fallbacks;
        continue;
      }
      // w, h were rounded from sqrt(area * r) and sqrt(area / r).
      const double area = static_cast<double>(b.width) * b.height / (static_cast<double>(w) * h);
      const double lo_w = b.width - 0.5, hi_w = b.width + 0.5;
      const double lo_h = std::max(b.height - 0.5, 1e-9), hi_h = b.height + 0.5;
      CHECK(lo_w * lo_h <= spec.scale_max * w * h * (1 + 1e-12));
      CHECK(hi_w * hi_h >= spec.scale_min * w * h * (1 - 1e-12));
      CHECK(lo_w / hi_h <= spec.ratio_max * (1 + 1e-12));
      CHECK(hi_w / lo_h >= spec.ratio_min * (1 - 1e-12));
      CHECK(area <= 1.0);
    }
  }
  // Ordinary photos almost never need the fallback.
  CHECK(fallbacks < total / 10);
}

TEST_CASE("crop box: extreme aspect ratios take the centre fallback", "[crop]") {
  TransformSpec spec;
  for (uint64_t i = 0; i < 50; ++i) {
    Rng rng = Rng::ForKeys(7, 0, i);
    bool fallback = false;
    // Wide: in_ratio 100 > 4/3 -> h = H, w = round(H * 4/3) = 13.
    CropBox b = RandomResizedCropBox(1000, 10, spec, rng, &fallback);
    CHECK(fallback);
    CHECK(b == CropBox{0, 493, 10, 13});
    // Tall: in_ratio 0.01 < 3/4 -> w = W, h = round(W / (3/4)) = 13.
    b = RandomResizedCropBox(10, 1000, spec, rng, &fallback);
    CHECK(fallback);
    CHECK(b == CropBox{493, 0, 13, 10});
  }
  // In-range aspect but scale above 1: every try fails -> the whole image.
  spec.scale_min = 5;
  spec.scale_max = 6;
  Rng rng(1);
  bool fallback = false;
  CHECK(RandomResizedCropBox(400, 300, spec, rng, &fallback) == CropBox{0, 0, 300, 400});
  CHECK(fallback);
}

TEST_CASE("crop box: same keys give the same crops other keys others", "[crop]") {
  TransformSpec spec;
  int same_as_next = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    Rng a = Rng::ForKeys(3, 1, i), b = Rng::ForKeys(3, 1, i), c = Rng::ForKeys(3, 1, i + 1);
    const CropBox ba = RandomResizedCropBox(640, 480, spec, a);
    CHECK(ba == RandomResizedCropBox(640, 480, spec, b));
    if (ba == RandomResizedCropBox(640, 480, spec, c)) ++same_as_next;
  }
  CHECK(same_as_next < 3);
}

TEST_CASE("crop box: eval window follows torchvision Resize + CenterCrop", "[crop]") {
  TransformSpec spec;  // resize 256, crop 224
  // 500x375: short side 375 -> 256, long int(256*500/375) = int(341.33) = 341;
  // left = round((341 - 224) / 2) = round(58.5) = 58 (half to even).
  CHECK(EvalCenterWindow(500, 375, spec) == EvalWindow{341, 256, 16, 58});
  CHECK(EvalCenterWindow(375, 500, spec) == EvalWindow{256, 341, 58, 16});
  CHECK(EvalCenterWindow(256, 256, spec) == EvalWindow{256, 256, 16, 16});
  // 1023x257: int(256*1023/257) = int(1019.01) = 1019; left = round(397.5) = 398.
  CHECK(EvalCenterWindow(1023, 257, spec) == EvalWindow{1019, 256, 16, 398});
}

TEST_CASE("crop box: DCT scale denominator keeps the crop at least the output", "[crop]") {
  CHECK(ChooseScaleDenom(500, 375, 224, 224) == 1);
  CHECK(ChooseScaleDenom(448, 448, 224, 224) == 2);
  CHECK(ChooseScaleDenom(447, 2000, 224, 224) == 1);
  CHECK(ChooseScaleDenom(1000, 900, 224, 224) == 4);
  CHECK(ChooseScaleDenom(1792, 1792, 224, 224) == 8);
  CHECK(ChooseScaleDenom(100000, 100000, 224, 224) == 8);
  CHECK(ChooseScaleDenom(100, 100, 224, 224) == 1);
}

}  // namespace conveyor
