// Affine ops (core/decode/affine_ops.h): identity at magnitude 0, where translations, quarter
// turns and shears move known pixels, the zero fill, MapPoint against where a lone bright pixel
// lands, and the scratch buffer's reuse. Byte equality with torchvision lives in
// tests/python/test_affine_ops_vs_torchvision.py.
#include "core/decode/affine_ops.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace conveyor {
namespace {

constexpr AffineOp kAllOps[] = {AffineOp::kShearX, AffineOp::kShearY, AffineOp::kTranslateX,
                                AffineOp::kTranslateY, AffineOp::kRotate};

// A width x height RGB image with its own pixels.
struct OwnedImage {
  OwnedImage(int w, int h, uint8_t value = 0) : width(w), height(h), pixels(w * h * 3, value) {}
  RgbView view() { return RgbView{pixels.data(), width, height}; }
  uint8_t* at(int x, int y) { return pixels.data() + (static_cast<size_t>(y) * width + x) * 3; }
  void Set(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    uint8_t* p = at(x, y);
    p[0] = r;
    p[1] = g;
    p[2] = b;
  }
  bool Is(int x, int y, uint8_t r, uint8_t g, uint8_t b) {
    const uint8_t* p = at(x, y);
    return p[0] == r && p[1] == g && p[2] == b;
  }
  int width;
  int height;
  std::vector<uint8_t> pixels;
};

OwnedImage RandomImage(int w, int h, uint32_t seed) {
  OwnedImage image(w, h);
  std::mt19937 gen(seed);
  for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(gen());
  return image;
}

OwnedImage Apply(OwnedImage image, AffineOp op, double magnitude) {
  std::vector<uint8_t> scratch;
  ApplyAffineOp(image.view(), op, magnitude, &scratch);
  return image;
}

// The output pixels equal to (255, 255, 255).
std::vector<std::pair<int, int>> BrightPixels(OwnedImage& image) {
  std::vector<std::pair<int, int>> found;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      if (image.Is(x, y, 255, 255, 255)) found.emplace_back(x, y);
    }
  }
  return found;
}

}  // namespace

TEST_CASE("affine ops: magnitude 0 is the identity", "[affine_ops]") {
  for (AffineOp op : kAllOps) {
    for (auto [w, h] : {std::pair{37, 23}, std::pair{1, 1}, std::pair{2, 5}, std::pair{16, 16}}) {
      const OwnedImage before = RandomImage(w, h, 11);
      CHECK(Apply(before, op, 0.0).pixels == before.pixels);
      CHECK(Apply(before, op, -0.0).pixels == before.pixels);
    }
  }
  // Whole turns are the identity too.
  const OwnedImage before = RandomImage(9, 4, 12);
  CHECK(Apply(before, AffineOp::kRotate, 360.0).pixels == before.pixels);
  CHECK(Apply(before, AffineOp::kRotate, -720.0).pixels == before.pixels);
}

TEST_CASE("affine ops: translations move pixels by int(magnitude) and fill 0", "[affine_ops]") {
  const int w = 10, h = 6;
  OwnedImage image(w, h, 7);
  image.Set(2, 3, 200, 100, 50);

  OwnedImage right = Apply(image, AffineOp::kTranslateX, 3.9);  // int(3.9) == 3
  CHECK(right.Is(5, 3, 200, 100, 50));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      if (x < 3) {
        CHECK(right.Is(x, y, 0, 0, 0));
      } else if (!(x == 5 && y == 3)) {
        CHECK(right.Is(x, y, 7, 7, 7));
      }
    }
  }

  OwnedImage left = Apply(image, AffineOp::kTranslateX, -2.0);
  CHECK(left.Is(0, 3, 200, 100, 50));
  CHECK(left.Is(w - 1, 0, 0, 0, 0));
  CHECK(left.Is(w - 2, 5, 0, 0, 0));
  CHECK(left.Is(w - 3, 5, 7, 7, 7));

  OwnedImage down = Apply(image, AffineOp::kTranslateY, 2.0);
  CHECK(down.Is(2, 5, 200, 100, 50));
  CHECK(down.Is(4, 0, 0, 0, 0));
  CHECK(down.Is(4, 1, 0, 0, 0));
  CHECK(down.Is(4, 2, 7, 7, 7));

  OwnedImage up = Apply(image, AffineOp::kTranslateY, -3.5);  // int(-3.5) == -3
  CHECK(up.Is(2, 0, 200, 100, 50));
  CHECK(up.Is(0, h - 3, 0, 0, 0));
  CHECK(up.Is(0, h - 4, 7, 7, 7));

  // Moved out entirely: all fill.
  CHECK(Apply(image, AffineOp::kTranslateX, 32.0).pixels == std::vector<uint8_t>(w * h * 3, 0));
}

TEST_CASE("affine ops: quarter turns of a square move pixels as a rotation does", "[affine_ops]") {
  const int n = 7;
  const OwnedImage source = RandomImage(n, n, 3);
  OwnedImage in = source;
  OwnedImage ccw = Apply(source, AffineOp::kRotate, 90.0);  // counter-clockwise
  OwnedImage half = Apply(source, AffineOp::kRotate, 180.0);
  OwnedImage cw = Apply(source, AffineOp::kRotate, -90.0);
  for (int y = 0; y < n; ++y) {
    for (int x = 0; x < n; ++x) {
      const uint8_t* p = in.at(x, y);
      // The top-right corner goes to the top left under a counter-clockwise turn.
      CHECK(ccw.Is(y, n - 1 - x, p[0], p[1], p[2]));
      CHECK(half.Is(n - 1 - x, n - 1 - y, p[0], p[1], p[2]));
      CHECK(cw.Is(n - 1 - y, x, p[0], p[1], p[2]));
    }
  }
  // Even side too, where the centre is a pixel corner.
  const OwnedImage even = RandomImage(6, 6, 4);
  OwnedImage even_in = even;
  OwnedImage even_ccw = Apply(even, AffineOp::kRotate, 90.0);
  const uint8_t* top_right = even_in.at(5, 0);
  CHECK(even_ccw.Is(0, 0, top_right[0], top_right[1], top_right[2]));
  const uint8_t* bottom_left = even_in.at(0, 5);
  CHECK(even_ccw.Is(5, 5, bottom_left[0], bottom_left[1], bottom_left[2]));
}

TEST_CASE("affine ops: shears move a known pixel", "[affine_ops]") {
  // ShearX m: the output pixel (x, y) takes the source pixel containing
  // (x + 0.5 + m (y + 0.5), y + 0.5). With m = 0.5, source (10, 6) lands at x + 3.75 in
  // [10, 11), i.e. x = 7.
  OwnedImage image(20, 10, 0);
  image.Set(10, 6, 255, 255, 255);
  OwnedImage sheared_x = Apply(image, AffineOp::kShearX, 0.5);
  CHECK(BrightPixels(sheared_x) == std::vector<std::pair<int, int>>{{7, 6}});
  // m = -0.5: x - 3.25 in [10, 11): x = 13.
  OwnedImage sheared_back = Apply(image, AffineOp::kShearX, -0.5);
  CHECK(BrightPixels(sheared_back) == std::vector<std::pair<int, int>>{{13, 6}});

  // ShearY m: (x, y) takes the source containing (x + 0.5, y + 0.5 + m (x + 0.5)). Source (6, 8)
  // with m = 0.5: y + 3.75 in [8, 9), i.e. y = 5.
  OwnedImage column(10, 20, 0);
  column.Set(6, 8, 255, 255, 255);
  OwnedImage sheared_y = Apply(column, AffineOp::kShearY, 0.5);
  CHECK(BrightPixels(sheared_y) == std::vector<std::pair<int, int>>{{6, 5}});
  // Row 0 is the shear's fixed line for ShearX: it stays where it was.
  OwnedImage top = RandomImage(12, 5, 8);
  OwnedImage top_in = top;
  OwnedImage top_sheared = Apply(top, AffineOp::kShearX, -0.9);
  const uint8_t* p = top_in.at(4, 0);
  CHECK(top_sheared.Is(4, 0, p[0], p[1], p[2]));
}

TEST_CASE("affine ops: MapPoint follows a lone bright pixel", "[affine_ops]") {
  struct Case {
    AffineOp op;
    double magnitude;
  };
  const Case cases[] = {
      {AffineOp::kTranslateX, 5.7},  {AffineOp::kTranslateX, -12.0}, {AffineOp::kTranslateY, 9.0},
      {AffineOp::kTranslateY, -3.2}, {AffineOp::kShearX, 0.33},      {AffineOp::kShearX, -0.99},
      {AffineOp::kShearY, 0.66},     {AffineOp::kShearY, -0.2},      {AffineOp::kRotate, 30.0},
      {AffineOp::kRotate, -135.0},   {AffineOp::kRotate, 90.0},      {AffineOp::kRotate, 180.0},
      {AffineOp::kRotate, 4.5},
  };
  const int w = 31, h = 21;
  const std::pair<int, int> spots[] = {{15, 10}, {3, 4}, {25, 17}, {8, 15}, {20, 2}};
  for (const Case& c : cases) {
    int found = 0;  // spots that land somewhere
    for (auto [sx, sy] : spots) {
      OwnedImage image(w, h, 0);
      image.Set(sx, sy, 255, 255, 255);
      OwnedImage out = Apply(image, c.op, c.magnitude);
      double x = sx + 0.5, y = sy + 0.5;
      MapPoint(c.op, c.magnitude, w, h, &x, &y);
      INFO("op " << static_cast<int>(c.op) << " magnitude " << c.magnitude << " spot " << sx << ","
                 << sy << " maps to " << x << "," << y);
      const auto bright = BrightPixels(out);
      // Nearest sampling can drop, repeat or shift the pixel by one; never further.
      for (auto [bx, by] : bright) {
        CHECK(std::fabs(bx + 0.5 - x) <= 1.0);
        CHECK(std::fabs(by + 0.5 - y) <= 1.0);
      }
      const bool translate = c.op == AffineOp::kTranslateX || c.op == AffineOp::kTranslateY;
      const bool exact = translate || c.magnitude == 90.0 || c.magnitude == 180.0;
      const bool inside = x >= 0 && x < w && y >= 0 && y < h;
      if (exact && inside) {
        CHECK(bright ==
              std::vector<std::pair<int, int>>{{static_cast<int>(x), static_cast<int>(y)}});
      } else if (exact) {
        CHECK(bright.empty());
      }
      // A shear moves whole rows (columns) by a shift, so the pixel survives inside the image;
      // a rotation may drop it.
      const bool shear = c.op == AffineOp::kShearX || c.op == AffineOp::kShearY;
      if (shear && x >= 1 && x < w - 1 && y >= 1 && y < h - 1) CHECK(bright.size() == 1);
      if (!bright.empty()) ++found;
    }
    CHECK(found >= 3);
  }
  // Source and output coordinates are continuous: a quarter turn maps the top-left corner of a
  // square to its bottom-left corner.
  double x = 0, y = 0;
  MapPoint(AffineOp::kRotate, 90.0, 8, 8, &x, &y);
  CHECK(x == Approx(0.0).margin(1e-12));
  CHECK(y == Approx(8.0));
}

TEST_CASE("affine ops: the scratch buffer is reused", "[affine_ops]") {
  OwnedImage image = RandomImage(40, 30, 5);
  std::vector<uint8_t> scratch;
  ApplyAffineOp(image.view(), AffineOp::kRotate, 10.0, &scratch);
  const uint8_t* buffer = scratch.data();
  const size_t capacity = scratch.capacity();
  REQUIRE(capacity >= image.pixels.size());
  for (AffineOp op : kAllOps) ApplyAffineOp(image.view(), op, -0.5, &scratch);
  OwnedImage smaller = RandomImage(7, 9, 6);
  ApplyAffineOp(smaller.view(), AffineOp::kShearY, 0.4, &scratch);
  CHECK(scratch.data() == buffer);
  CHECK(scratch.capacity() == capacity);
}

TEST_CASE("affine ops: WarpNearest fills with the given colour", "[affine_ops]") {
  OwnedImage source = RandomImage(5, 4, 9);
  OwnedImage out(5, 4, 0);
  InverseAffine shift;  // output (x, y) samples source (x + 2, y): the last two columns fill
  shift.a[2] = 2.0;
  WarpNearest(source.pixels.data(), out.view(), shift, Rgb8{1, 2, 3});
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 3; ++x) {
      const uint8_t* p = source.at(x + 2, y);
      CHECK(out.Is(x, y, p[0], p[1], p[2]));
    }
    CHECK(out.Is(3, y, 1, 2, 3));
    CHECK(out.Is(4, y, 1, 2, 3));
  }
}

}  // namespace conveyor
