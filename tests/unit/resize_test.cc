// Resampler / ResizeRgb: Pillow's exact values on small cases, identity and
// constant images, windows of a resize, batching, and the AVX2 kernels
// against the portable ones. (Bit-exactness against torchvision on real
// images is tests/python/test_decode_vs_pil.py.)
#include "core/decode/resize.h"

#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"

namespace conveyor {
namespace {

ResampleAxis Axis(int in, int out, double b0 = 0, double b1 = -1) {
  ResampleAxis a;
  a.in_size = in;
  a.box0 = b0;
  a.box1 = b1 < 0 ? in : b1;
  a.resized_size = out;
  a.out_offset = 0;
  a.out_size = out;
  return a;
}

std::vector<uint8_t> Resize(const std::vector<uint8_t>& src, int w, int h, const ResampleAxis& x,
                            const ResampleAxis& y, bool simd = true) {
  std::vector<uint8_t> out(static_cast<size_t>(x.out_size) * y.out_size * 3);
  REQUIRE(ResizeRgb(src.data(), w, h, static_cast<size_t>(w) * 3, x, y, out.data(), simd).ok());
  return out;
}

std::vector<uint8_t> Noise(int w, int h, uint64_t seed) {
  std::vector<uint8_t> v(static_cast<size_t>(w) * h * 3);
  Rng rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng.Below(256));
  return v;
}

}  // namespace

TEST_CASE("resize: matches Pillow on a 4-pixel row", "[resize]") {
  // PIL 9.4: Image.fromarray(a).resize(size, Image.BILINEAR[, box]).
  const std::vector<uint8_t> row = {0, 10, 20, 100, 110, 120, 200, 210, 220, 250, 255, 0};
  CHECK(Resize(row, 4, 1, Axis(4, 2), Axis(1, 1)) ==
        std::vector<uint8_t>{71, 81, 91, 207, 215, 111});
  CHECK(Resize(row, 4, 1, Axis(4, 3), Axis(1, 1)) ==
        std::vector<uint8_t>{30, 40, 50, 150, 160, 170, 235, 242, 66});
  CHECK(Resize(row, 4, 1, Axis(4, 7), Axis(1, 1)) ==
        std::vector<uint8_t>{0,   10,  20,  36,  46,  56,  93, 103, 113, 150, 160,
                             170, 204, 213, 204, 232, 239, 79, 250, 255, 0});
  CHECK(Resize(row, 4, 1, Axis(4, 2, 0.5, 3.25), Axis(1, 1)) ==
        std::vector<uint8_t>{66, 76, 86, 195, 204, 158});
}

TEST_CASE("resize: identity and constant images", "[resize]") {
  const std::vector<uint8_t> img = Noise(37, 23, 1);
  CHECK(Resize(img, 37, 23, Axis(37, 37), Axis(23, 23)) == img);
  std::vector<uint8_t> flat(50 * 40 * 3);
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<uint8_t>(i % 3 == 0 ? 17 : 200);
  for (auto [ow, oh] : {std::pair{7, 3}, std::pair{224, 224}, std::pair{50, 1}}) {
    const std::vector<uint8_t> out = Resize(flat, 50, 40, Axis(50, ow), Axis(40, oh));
    for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == (i % 3 == 0 ? 17 : 200));
  }
}

TEST_CASE("resize: a window of a resize is that part of the full resize", "[resize]") {
  const std::vector<uint8_t> img = Noise(120, 90, 2);
  const std::vector<uint8_t> full = Resize(img, 120, 90, Axis(120, 70), Axis(90, 50));
  ResampleAxis x = Axis(120, 70), y = Axis(90, 50);
  x.out_offset = 13;
  x.out_size = 40;
  y.out_offset = 9;
  y.out_size = 30;
  const std::vector<uint8_t> part = Resize(img, 120, 90, x, y);
  for (int r = 0; r < 30; ++r) {
    for (int c = 0; c < 40 * 3; ++c) {
      REQUIRE(part[r * 120 + c] == full[(r + 9) * 210 + 13 * 3 + c]);
    }
  }
}

TEST_CASE("resize: the plan reads only the rows and columns it needs", "[resize]") {
  Resampler r;
  ResampleAxis x = Axis(1000, 100);
  x.out_offset = 40;
  x.out_size = 20;  // outputs 40..59 of 100 -> source ~400..600
  REQUIRE(r.Plan(x, Axis(10, 10)).ok());
  CHECK(r.src_x_begin() >= 390);
  CHECK(r.src_x_end() <= 610);
  CHECK(r.src_y_begin() == 0);
  CHECK(r.src_y_end() == 10);
}

TEST_CASE("resize: rows pushed in batches give the same result", "[resize]") {
  const int w = 64, h = 48;
  std::vector<uint8_t> img = Noise(w, h, 3);
  img.resize(img.size() + Resampler::kReadPadding);
  Resampler r;
  auto run = [&](int batch) {
    REQUIRE(r.Plan(Axis(w, 30), Axis(h, 20)).ok());
    for (int y = 0; y < h; y += batch) {
      r.PushRows(img.data() + y * w * 3, w * 3, std::min(batch, h - y));
    }
    std::vector<uint8_t> out;
    r.Finish([&](int, const uint8_t* rgb) { out.insert(out.end(), rgb, rgb + 30 * 3); });
    return out;
  };
  const std::vector<uint8_t> one = run(h);
  CHECK(run(1) == one);
  CHECK(run(7) == one);
}

TEST_CASE("resize: AVX2 kernels equal the portable kernels", "[resize]") {
  if (!Resampler(true).simd()) {
    WARN("CPU without AVX2: only the portable kernels run here");
    return;
  }
  Rng rng(4);
  for (int t = 0; t < 60; ++t) {
    const int w = 1 + static_cast<int>(rng.Below(400));
    const int h = 1 + static_cast<int>(rng.Below(300));
    const std::vector<uint8_t> img = Noise(w, h, t);
    const int ow = 1 + static_cast<int>(rng.Below(300));
    const int oh = 1 + static_cast<int>(rng.Below(300));
    const double bx0 = rng.Uniform(0, w * 0.3), bx1 = rng.Uniform(w * 0.6, w);
    const double by0 = rng.Uniform(0, h * 0.3), by1 = rng.Uniform(h * 0.6, h);
    const ResampleAxis x = Axis(w, ow, bx0, bx1), y = Axis(h, oh, by0, by1);
    INFO(w << "x" << h << " -> " << ow << "x" << oh);
    REQUIRE(Resize(img, w, h, x, y, true) == Resize(img, w, h, x, y, false));
  }
  // Large downscale factors: many taps per output.
  const std::vector<uint8_t> big = Noise(2000, 30, 5);
  CHECK(Resize(big, 2000, 30, Axis(2000, 7), Axis(30, 3), true) ==
        Resize(big, 2000, 30, Axis(2000, 7), Axis(30, 3), false));
}

TEST_CASE("resize: malformed axes are rejected", "[resize]") {
  Resampler r;
  CHECK_FALSE(r.Plan(Axis(0, 10), Axis(10, 10)).ok());
  CHECK_FALSE(r.Plan(Axis(10, 0), Axis(10, 10)).ok());
  CHECK_FALSE(r.Plan(Axis(10, 10, 5, 5), Axis(10, 10)).ok());
  CHECK_FALSE(r.Plan(Axis(10, 10, 0, 11), Axis(10, 10)).ok());
  ResampleAxis x = Axis(10, 10);
  x.out_offset = 5;  // window 5..15 of 10
  CHECK_FALSE(r.Plan(x, Axis(10, 10)).ok());
}

TEST_CASE("resize: filter taps follow Pillow's support", "[resize]") {
  AxisFilter f;
  ComputeAxisFilter(Axis(448, 224), &f);  // scale 2: support 2, ksize 5
  CHECK(f.ksize == 5);
  int64_t sum = 0;
  for (int k = 0; k < f.count[100]; ++k) sum += f.coeffs[100 * f.ksize + k];
  CHECK(std::abs(sum - (1 << 22)) <= f.count[100]);
  ComputeAxisFilter(Axis(224, 224), &f);
  CHECK(f.identity);
  ComputeAxisFilter(Axis(100, 224), &f);  // upscale: support 1
  CHECK(f.ksize == 3);
  CHECK_FALSE(f.identity);
}

}  // namespace conveyor
