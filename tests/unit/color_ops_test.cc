// Colour ops: identities, degenerate images and hand-computed pixels of the
// torchvision-on-PIL semantics (the Python test compares whole images with
// torchvision itself).
#include "core/decode/color_ops.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace conveyor {
namespace {

// An owned packed RGB image for the tests.
struct TestImage {
  int width;
  int height;
  std::vector<uint8_t> pixels;

  TestImage(int w, int h, std::vector<uint8_t> bytes)
      : width(w), height(h), pixels(std::move(bytes)) {}

  RgbView view() { return RgbView{pixels.data(), width, height}; }
  const uint8_t* at(int x, int y) const {
    return pixels.data() + (static_cast<size_t>(y) * width + x) * 3;
  }
};

TestImage Noise(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(static_cast<size_t>(width) * height * 3);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xff);
  return TestImage(width, height, bytes);
}

TestImage Constant(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> bytes(static_cast<size_t>(width) * height * 3);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    bytes[i] = r;
    bytes[i + 1] = g;
    bytes[i + 2] = b;
  }
  return TestImage(width, height, bytes);
}

TestImage Pixels(std::vector<uint8_t> bytes) {
  const int width = static_cast<int>(bytes.size() / 3);
  return TestImage(width, 1, std::move(bytes));
}

}  // namespace

TEST_CASE("colour ops: factor 1 is the identity of the blends", "[color_ops]") {
  const TestImage original = Noise(37, 23, 1);
  std::vector<uint8_t> scratch;
  for (int op = 0; op < 4; ++op) {
    TestImage image = original;
    if (op == 0) AdjustBrightness(image.view(), 1.0);
    if (op == 1) AdjustContrast(image.view(), 1.0);
    if (op == 2) AdjustSaturation(image.view(), 1.0);
    if (op == 3) AdjustSharpness(image.view(), 1.0, &scratch);
    INFO("op " << op);
    CHECK(image.pixels == original.pixels);
  }
}

TEST_CASE("colour ops: brightness 0 is black, other factors scale and clamp", "[color_ops]") {
  TestImage black = Noise(9, 7, 2);
  AdjustBrightness(black.view(), 0.0);
  CHECK(black.pixels == std::vector<uint8_t>(black.pixels.size(), 0));

  // float(0.5) * 255 = 127.5 truncates to 127; 1.7 * 200 clamps to 255.
  TestImage half = Pixels({255, 100, 3});
  AdjustBrightness(half.view(), 0.5);
  CHECK(half.pixels == std::vector<uint8_t>{127, 50, 1});
  TestImage bright = Pixels({100, 200, 0});
  AdjustBrightness(bright.view(), 1.7);
  CHECK(bright.pixels == std::vector<uint8_t>{170, 255, 0});
}

TEST_CASE("colour ops: contrast blends with the rounded mean grey", "[color_ops]") {
  // L is 0 and 255: mean 127.5, grey int(128.0) = 128.
  TestImage flat = Pixels({0, 0, 0, 255, 255, 255});
  AdjustContrast(flat.view(), 0.0);
  CHECK(flat.pixels == std::vector<uint8_t>(6, 128));
  TestImage half = Pixels({0, 0, 0, 255, 255, 255});
  AdjustContrast(half.view(), 0.5);  // 128 - 64 and 128 + 63.5
  CHECK(half.pixels == std::vector<uint8_t>{64, 64, 64, 191, 191, 191});
}

TEST_CASE("colour ops: grayscale is convert(\"L\") and saturation 0 equals it", "[color_ops]") {
  TestImage primaries = Pixels({255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255});
  ToGrayscale(primaries.view());
  CHECK(primaries.pixels ==
        std::vector<uint8_t>{76, 76, 76, 150, 150, 150, 29, 29, 29, 255, 255, 255});
  TestImage grey = Noise(31, 17, 3);
  TestImage desaturated = grey;
  ToGrayscale(grey.view());
  AdjustSaturation(desaturated.view(), 0.0);
  CHECK(desaturated.pixels == grey.pixels);
}

TEST_CASE("colour ops: hue rotates PIL's 8-bit HSV", "[color_ops]") {
  // Red is h 0; +1/3 turn gives h 85 (sector 2, f 0): pure green.
  TestImage red = Pixels({255, 0, 0});
  AdjustHue(red.view(), 1.0 / 3.0);
  CHECK(red.pixels == std::vector<uint8_t>{0, 255, 0});
  // -0.5: np.uint8(-127.5) is 129; sector 3 with f = 129 * 6 / 255 - 3.
  TestImage back = Pixels({255, 0, 0});
  AdjustHue(back.view(), -0.5);
  CHECK(back.pixels == std::vector<uint8_t>{0, 246, 255});
  // The round trip through 8-bit HSV is lossy even without a shift.
  TestImage lossy = Pixels({10, 200, 40});
  AdjustHue(lossy.view(), 0.0);
  CHECK(lossy.pixels == std::vector<uint8_t>{10, 200, 37});
  // Greys have no saturation and stay as they are.
  TestImage grey = Constant(3, 2, 77, 77, 77);
  AdjustHue(grey.view(), 0.37);
  CHECK(grey.pixels == Constant(3, 2, 77, 77, 77).pixels);
}

TEST_CASE("colour ops: sharpness blends with PIL's SMOOTH inside the border", "[color_ops]") {
  std::vector<uint8_t> scratch;
  TestImage dot = Constant(3, 3, 0, 0, 0);
  dot.pixels[12] = dot.pixels[13] = dot.pixels[14] = 130;
  TestImage sharpened = dot;
  // SMOOTH at the centre: 0.5 + 130 * 5 / 13 = 50.5, truncated.
  AdjustSharpness(dot.view(), 0.0, &scratch);
  CHECK(dot.at(1, 1)[0] == 50);
  CHECK(dot.at(0, 0)[0] == 0);
  AdjustSharpness(sharpened.view(), 2.0, &scratch);  // 50 + 2 * (130 - 50)
  CHECK(sharpened.at(1, 1)[2] == 210);

  // Border pixels, and images under 3x3, are left as they are.
  const TestImage original = Noise(19, 11, 4);
  TestImage image = original;
  AdjustSharpness(image.view(), 0.0, &scratch);
  for (int x = 0; x < image.width; ++x) {
    CHECK(image.at(x, 0)[1] == original.at(x, 0)[1]);
    CHECK(image.at(x, 10)[1] == original.at(x, 10)[1]);
  }
  for (int y = 0; y < image.height; ++y) CHECK(image.at(18, y)[0] == original.at(18, y)[0]);
  CHECK(image.pixels != original.pixels);
  const TestImage thin = Noise(2, 9, 5);
  TestImage thin_copy = thin;
  AdjustSharpness(thin_copy.view(), 0.0, &scratch);
  CHECK(thin_copy.pixels == thin.pixels);
}

TEST_CASE("colour ops: posterize keeps the top bits", "[color_ops]") {
  const TestImage original = Noise(16, 16, 6);
  TestImage same = original;
  Posterize(same.view(), 8);
  CHECK(same.pixels == original.pixels);
  TestImage zero = original;
  Posterize(zero.view(), 0);
  CHECK(zero.pixels == std::vector<uint8_t>(zero.pixels.size(), 0));
  TestImage three = Pixels({0xff, 0x1f, 0xa5});
  Posterize(three.view(), 3);
  CHECK(three.pixels == std::vector<uint8_t>{0xe0, 0x00, 0xa0});
  TestImage bad = original;
  Posterize(bad.view(), 9);  // outside the precondition: unchanged
  CHECK(bad.pixels == original.pixels);
}

TEST_CASE("colour ops: solarize inverts bytes at or above the threshold", "[color_ops]") {
  const TestImage original = Noise(16, 16, 7);
  TestImage none = original;
  Solarize(none.view(), 256.0);
  CHECK(none.pixels == original.pixels);
  TestImage all = original;
  Solarize(all.view(), 0.0);
  for (size_t i = 0; i < all.pixels.size(); ++i) {
    CHECK(all.pixels[i] == 255 - original.pixels[i]);
  }
  TestImage half = Pixels({127, 128, 255});
  Solarize(half.view(), 127.5);
  CHECK(half.pixels == std::vector<uint8_t>{127, 127, 0});
}

TEST_CASE("colour ops: autocontrast and equalize", "[color_ops]") {
  const TestImage flat = Constant(5, 4, 40, 90, 200);
  TestImage auto_flat = flat;
  AutoContrast(auto_flat.view());
  CHECK(auto_flat.pixels == flat.pixels);
  TestImage equal_flat = flat;
  Equalize(equal_flat.view());
  CHECK(equal_flat.pixels == flat.pixels);

  // Per channel: R 50..150 stretched to 0..255 (100 -> int(127.49..) = 127),
  // G 0..2 likewise, B constant.
  TestImage stretch = Pixels({50, 0, 7, 100, 1, 7, 150, 2, 7});
  AutoContrast(stretch.view());
  CHECK(stretch.pixels == std::vector<uint8_t>{0, 0, 7, 127, 127, 7, 255, 255, 7});

  // 300 x 10, 300 x 20, 10 x 30: step (610 - 10) / 255 = 2, n from 1;
  // LUT 10 -> 1 / 2, 20 -> 301 / 2, 30 -> 601 / 2 clipped.
  std::vector<uint8_t> bytes;
  for (int i = 0; i < 610; ++i) {
    const uint8_t v = i < 300 ? 10 : i < 600 ? 20 : 30;
    bytes.insert(bytes.end(), {v, v, v});
  }
  TestImage levels = Pixels(bytes);
  Equalize(levels.view());
  CHECK(levels.at(0, 0)[0] == 0);
  CHECK(levels.at(300, 0)[1] == 150);
  CHECK(levels.at(609, 0)[2] == 255);
}

TEST_CASE("colour ops: gaussian blur", "[color_ops]") {
  std::vector<float> scratch;
  const TestImage original = Noise(37, 23, 8);
  SECTION("a tiny sigma or a 1x1 kernel is the identity") {
    TestImage image = original;
    GaussianBlur(image.view(), 3, 5, 0.01, 0.01, &scratch);
    CHECK(image.pixels == original.pixels);
    GaussianBlur(image.view(), 1, 1, 2.0, 2.0, &scratch);
    CHECK(image.pixels == original.pixels);
  }
  SECTION("a constant image stays constant") {
    TestImage image = Constant(9, 6, 13, 128, 250);
    GaussianBlur(image.view(), 9, 11, 1.5, 3.0, &scratch);
    CHECK(image.pixels == Constant(9, 6, 13, 128, 250).pixels);
  }
  SECTION("reflect padding, by hand") {
    // A wide sigma is a box filter; [0 90 180] pads to [90 0 90 180 90].
    TestImage row = Pixels({0, 0, 0, 90, 90, 90, 180, 180, 180});
    GaussianBlur(row.view(), 3, 1, 1e6, 1.0, &scratch);
    CHECK(row.pixels == std::vector<uint8_t>{60, 60, 60, 90, 90, 90, 120, 120, 120});
  }
  SECTION("the largest kernels reflect padding allows, and a reused scratch") {
    TestImage big = Noise(5, 3, 9);
    GaussianBlur(big.view(), 9, 5, 2.0, 1.0, &scratch);
    TestImage fresh = Noise(5, 3, 9);
    std::vector<float> fresh_scratch;
    GaussianBlur(fresh.view(), 9, 5, 2.0, 1.0, &fresh_scratch);
    CHECK(big.pixels == fresh.pixels);
    TestImage after = original;
    TestImage after_fresh = original;
    GaussianBlur(after.view(), 5, 5, 1.0, 1.0, &scratch);
    fresh_scratch.clear();
    GaussianBlur(after_fresh.view(), 5, 5, 1.0, 1.0, &fresh_scratch);
    CHECK(after.pixels == after_fresh.pixels);
    CHECK(after.pixels != original.pixels);
  }
  SECTION("outside the preconditions the image is left as it is") {
    TestImage image = Noise(4, 4, 10);
    const std::vector<uint8_t> before = image.pixels;
    GaussianBlur(image.view(), 9, 3, 1.0, 1.0, &scratch);  // 9 / 2 >= 4
    GaussianBlur(image.view(), 4, 3, 1.0, 1.0, &scratch);  // even
    GaussianBlur(image.view(), 3, 3, 0.0, 1.0, &scratch);  // sigma 0
    CHECK(image.pixels == before);
  }
}

}  // namespace conveyor
