// The whole-image ops as the transformer runs them (TransformSpec::image_ops,
// core/decode/sample_transformer.h): their validation, their draws, the
// random crop with padding on images, masks, boxes and keypoints, and
// TrivialAugmentWide's magnitude table. Per-op pixel exactness against
// torchvision is tests/python/test_image_ops_vs_torchvision.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/decode/sample_geometry.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "core/decode/trivial_augment.h"
#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

TransformSpec Small() {
  TransformSpec spec;
  spec.output_height = 20;
  spec.output_width = 28;
  spec.layout = Layout::kNHWC;
  return spec;
}

TEST_CASE("image ops: bad parameters are refused naming the field", "[augment][ops]") {
  auto message = [](const TransformSpec& s) {
    return std::string(ValidateTransformSpec(s).message());
  };
  TransformSpec s = Small();
  CHECK(ValidateTransformSpec(s).ok());
  s.image_ops.padding = -1;
  CHECK(message(s).find("image_ops.padding must be in [0, 4096]") != std::string::npos);
  s = Small();
  s.image_ops.padding = 20;
  s.image_ops.padding_mode = PadMode::kReflect;
  CHECK(message(s).find("less than the output's sides") != std::string::npos);
  s = Small();
  s.image_ops.jitter_probability = 1;
  s.image_ops.hue_min = -0.7;
  CHECK(message(s).find("image_ops.hue") != std::string::npos);
  s = Small();
  s.image_ops.blur_probability = 1;
  s.image_ops.blur_kernel_width = 4;
  s.image_ops.blur_kernel_height = 3;
  CHECK(message(s).find("blur_kernel_width must be odd") != std::string::npos);
  s.image_ops.blur_kernel_width = 57;  // > 2 × 28 − 1
  CHECK(message(s).find("at most 2 x the output side - 1 (55), got 57") != std::string::npos);
  s.image_ops.blur_kernel_width = 55;
  CHECK(ValidateTransformSpec(s).ok());
  s = Small();
  s.image_ops.trivial_augment_bins = 1;
  CHECK(message(s).find("trivial_augment_bins") != std::string::npos);
  s = Small();
  s.kind = MediaKind::kAudio;
  s.image_ops.padding = 2;
  CHECK(message(s).find("are for image pipelines") != std::string::npos);
}

TEST_CASE("image ops: draws come from the sample's Rng, only for the ops that are on",
          "[augment][ops]") {
  ImageOpsSpec ops;
  Rng untouched = Rng::ForKeys(1, 2, 3), reference = Rng::ForKeys(1, 2, 3);
  const ImageOpsDraws none = DrawImageOps(ops, untouched);
  CHECK(untouched.NextU64() == reference.NextU64());  // nothing drawn
  CHECK_FALSE(none.jitter);
  ops.padding = 4;
  ops.jitter_probability = 1;
  ops.brightness_min = 0.5;
  ops.brightness_max = 1.5;
  ops.blur_probability = 1;
  ops.blur_kernel_width = ops.blur_kernel_height = 3;
  ops.trivial_augment_bins = 31;
  std::vector<int> orders;  // the distinct jitter orders seen
  for (uint64_t i = 0; i < 400; ++i) {
    Rng a = Rng::ForKeys(9, 0, i), b = Rng::ForKeys(9, 0, i);
    const ImageOpsDraws d = DrawImageOps(ops, a);
    const ImageOpsDraws again = DrawImageOps(ops, b);
    CHECK(ImageOpsDrawsJson(ops, d) == ImageOpsDrawsJson(ops, again));
    CHECK(d.pad_top >= 0);
    CHECK(d.pad_top <= 8);
    CHECK(d.jitter);
    CHECK(d.brightness >= 0.5);
    CHECK(d.brightness < 1.5);
    CHECK(d.contrast == 1);  // identity ranges are not drawn
    CHECK(d.hue == 0);
    CHECK(d.blur_sigma >= 0.1);
    CHECK(d.blur_sigma < 2.0);
    std::array<int, 4> sorted = d.jitter_order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::array<int, 4>{0, 1, 2, 3});
    int code = 0;
    for (int k = 0; k < 4; ++k) code = code * 4 + d.jitter_order[k];
    if (std::find(orders.begin(), orders.end(), code) == orders.end()) orders.push_back(code);
  }
  CHECK(orders.size() == 24);  // every order of the four appears
}

TEST_CASE("trivial augment: torch's float32 linspace and posterize table", "[augment][ops]") {
  // torch.linspace(0, 0.99, 31)[1] and [15], (0, 32, 31)[1], (255, 0, 31)[3].
  CHECK(TorchLinspace(0.0f, 0.99f, 31, 1) == 0.032999999821186066f);
  CHECK(TorchLinspace(0.0f, 0.99f, 31, 15) == 0.4950000047683716f);
  CHECK(TorchLinspace(0.0f, 32.0f, 31, 1) == 1.0666667222976685f);
  CHECK(TorchLinspace(255.0f, 0.0f, 31, 3) == 229.5f);
  CHECK(TorchLinspace(0.0f, 135.0f, 31, 30) == 135.0f);
  // 8 - round(arange(31) / 5): torch's table for 31 and 10 bins.
  const std::vector<int> want31 = {8, 8, 8, 7, 7, 7, 7, 7, 6, 6, 6, 6, 6, 5, 5, 5,
                                   5, 5, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2};
  for (int i = 0; i < 31; ++i) {
    CHECK(TrivialAugmentMagnitude(TrivialAugmentOp::kPosterize, 31, i) == want31[i]);
  }
  const std::vector<int> want10 = {8, 7, 7, 6, 5, 5, 4, 3, 3, 2};
  for (int i = 0; i < 10; ++i) {
    CHECK(TrivialAugmentMagnitude(TrivialAugmentOp::kPosterize, 10, i) == want10[i]);
  }
  // Every op is drawn, the unsized ones with magnitude 0, signs both ways.
  std::vector<int> seen(kTrivialAugmentOps, 0);
  int negative = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    Rng rng = Rng::ForKeys(4, 0, i);
    const TrivialAugmentDraw d = DrawTrivialAugment(31, rng);
    ++seen[static_cast<int>(d.op)];
    if (!TrivialAugmentSigned(d.op)) CHECK(d.magnitude >= 0);
    if (d.op == TrivialAugmentOp::kEqualize) CHECK(d.magnitude == 0);
    negative += d.magnitude < 0;
  }
  for (int n : seen) CHECK(n > 80);
  CHECK(negative > 400);
}

TEST_CASE("random crop with padding: a window of the padded image, fill and geometry agree",
          "[augment][ops][mask]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(120, 90, 5);
  TransformSpec plain = Small();
  TransformSpec padded = plain;
  padded.image_ops.padding = 5;
  padded.image_ops.fill = 200;
  SampleTransformer t;
  std::vector<uint8_t> a(SampleBytes(plain)), b(SampleBytes(padded));
  const CropBox crop{3, 4, 60, 80};
  // RunCrop centres the window: the same pixels as without padding.
  REQUIRE(t.RunCrop(jpeg, plain, crop, true, 1, a.data()).ok());
  REQUIRE(t.RunCrop(jpeg, padded, crop, true, 1, b.data()).ok());
  CHECK(a == b);
  CHECK(t.LastGeometry()->shift_x == 0);
  // Run draws the window; the output is the plain output shifted, filled
  // where it left the image.
  int shifted = 0;
  for (uint64_t i = 0; i < 12; ++i) {
    Rng r1 = Rng::ForKeys(2, 0, i), r2 = Rng::ForKeys(2, 0, i);
    REQUIRE(t.Run(jpeg, plain, r1, a.data()).ok());
    const bool flip = t.last().flip;
    REQUIRE(t.Run(jpeg, padded, r2, b.data()).ok());
    REQUIRE(t.last().flip == flip);  // the crop and flip draws are unchanged
    const SampleGeometry g = *t.LastGeometry();
    CHECK(g.shift_x == 5 - t.last().ops.pad_left);
    CHECK(g.shift_y == 5 - t.last().ops.pad_top);
    shifted += g.shift_x != 0 || g.shift_y != 0;
    for (int y = 0; y < 20; ++y) {
      for (int x = 0; x < 28; ++x) {
        // Output x (after the flip) is pre-flip xs; the plain image's pixel
        // at xs − shift (its flip undone and redone).
        const int xs = flip ? 27 - x : x;
        const int px = xs - g.shift_x, py = y - g.shift_y;
        const uint8_t* got = &b[(static_cast<size_t>(y) * 28 + x) * 3];
        INFO("sample " << i << " y " << y << " x " << x);
        if (px < 0 || px >= 28 || py < 0 || py >= 20) {
          REQUIRE((got[0] == 200 && got[1] == 200 && got[2] == 200));
        } else {
          const int ax = flip ? 27 - px : px;
          REQUIRE(std::memcmp(got, &a[(static_cast<size_t>(py) * 28 + ax) * 3], 3) == 0);
        }
      }
    }
    // A mask follows the same window (fill 0 in the padding).
    std::vector<uint8_t> gray(120 * 90);
    // A smooth ramp far from 0, so that JPEG's loss never makes a 0.
    for (size_t k = 0; k < gray.size(); ++k) {
      gray[k] = static_cast<uint8_t>(60 + (k % 120 + k / 120) / 3);
    }
    const std::vector<uint8_t> mask = testing::CompressJpeg(gray, 120, 90, 1, 95);
    std::vector<uint8_t> m(20 * 28);
    REQUIRE(t.RunMask(mask, padded, g, m.data()).ok());
    for (int y = 0; y < 20; ++y) {
      for (int x = 0; x < 28; ++x) {
        const int xs = g.flip ? 27 - x : x;
        const bool outside =
            xs - g.shift_x < 0 || xs - g.shift_x >= 28 || y - g.shift_y < 0 || y - g.shift_y >= 20;
        INFO("mask y " << y << " x " << x);
        REQUIRE((m[y * 28 + x] == 0) == outside);
      }
    }
  }
  CHECK(shifted > 6);
}

TEST_CASE("padding moves boxes and keypoints by its shift; keypoints outside lose visibility",
          "[augment][ops][fields]") {
  SampleGeometry g{.source_width = 100,
                   .source_height = 80,
                   .output_width = 50,
                   .output_height = 40,
                   .scale_x = 0.5,
                   .scale_y = 0.5,
                   .shift_x = 3,
                   .shift_y = -2};
  std::vector<float> out;
  // A box [10, 10, 30, 40] → [5, 5, 15, 20] resized → + (3, −2).
  TransformBoxes(g, BoxFormat::kXyxy, false, std::vector<double>{10, 10, 30, 40, 7}, 5, &out);
  CHECK(out == std::vector<float>{8, 3, 18, 18, 7});
  // A box reaching the resized image's right edge stops there (+ shift), not in the padding.
  TransformBoxes(g, BoxFormat::kXyxy, false, std::vector<double>{60, 10, 200, 40}, 4, &out);
  CHECK(out == std::vector<float>{33, 3, 50, 18});
  g.flip = true;
  const std::vector<double> points = {10,
                                      10,
                                      2,
                                      /*outside after the shift*/ 0,
                                      1,
                                      2,
                                      /*no visibility*/ 99,
                                      79,
                                      1};
  TransformKeypoints(g, false, points, 3, &out);
  // (10,10) → (5,5) → (8,3) → flipped x 50 − 8 = 42, visible.
  CHECK(out[0] == 42);
  CHECK(out[1] == 3);
  CHECK(out[2] == 2);
  // (0,1) → (0,0.5) → (3,−1.5): above the output, visibility 0, row kept.
  CHECK(out[3] == 47);
  CHECK(out[4] == -1.5f);
  CHECK(out[5] == 0);
  CHECK(out.size() == 9);
  g.flip = false;
  TransformKeypoints(g, true, std::vector<double>{0.5, 0.5}, 2, &out);
  CHECK(out == std::vector<float>{(25.0f + 3) / 50, (20.0f - 2) / 40});
}

}  // namespace
}  // namespace conveyor
