// core/gpu/convert.h: the GPU conversion's math, checked on the CPU —
// bit-exact with the daemon's own float32 and float16 output (the
// SampleTransformer, on an image holding every uint8 value in every
// channel), bfloat16 against a reference, the NCHW / NHWC channel index, the
// kernel's grid-stride launch geometry simulated on the host for odd sizes,
// and the spec checks.
#include "core/gpu/convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/sample_transformer.h"
#include "core/gpu/convert_spec.h"

namespace conveyor::gpu {
namespace {

// A 24-bit BMP (bottom-up rows, padded to 4 bytes) of w × h RGB pixels.
std::vector<uint8_t> Bmp(int w, int h, const std::vector<uint8_t>& rgb) {
  const int row = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(row * h);
  std::vector<uint8_t> b(size, 0);
  auto put32 = [&](int at, uint32_t v) { std::memcpy(&b[at], &v, 4); };
  auto put16 = [&](int at, uint16_t v) { std::memcpy(&b[at], &v, 2); };
  b[0] = 'B';
  b[1] = 'M';
  put32(2, size);
  put32(10, 54);
  put32(14, 40);
  put32(18, static_cast<uint32_t>(w));
  put32(22, static_cast<uint32_t>(h));
  put16(26, 1);
  put16(28, 24);
  put32(34, static_cast<uint32_t>(row * h));
  for (int y = 0; y < h; ++y) {
    uint8_t* dst = &b[54 + static_cast<size_t>(h - 1 - y) * row];
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &rgb[(static_cast<size_t>(y) * w + x) * 3];
      dst[3 * x + 0] = p[2];
      dst[3 * x + 1] = p[1];
      dst[3 * x + 2] = p[0];
    }
  }
  return b;
}

std::vector<uint8_t> Run(SampleTransformer& t, const std::vector<uint8_t>& image,
                         const TransformSpec& spec, int w, int h) {
  std::vector<uint8_t> out(SampleBytes(spec));
  const absl::Status s = t.RunCrop(image, spec, CropBox{0, 0, h, w}, false, 1, out.data());
  INFO(s.ToString());
  REQUIRE(s.ok());
  return out;
}

ConvertParams ParamsFor(const TransformSpec& spec, uint64_t elements) {
  ConvertSpec c;
  c.elements = elements;
  c.plane = static_cast<uint64_t>(spec.output_height) * spec.output_width;
  c.channels_last = spec.layout == Layout::kNHWC;
  c.mean = spec.mean;
  c.std = spec.std;
  REQUIRE(ValidateConvertSpec(c).ok());
  return ParamsOf(c);
}

// Reference bfloat16: the float's value rounded to the nearest of its two
// bfloat16 neighbours (computed in double), ties to the even one.
uint16_t BFloat16Reference(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t down = static_cast<uint16_t>(x >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double v = f;
  const double lo = std::bit_cast<float>(static_cast<uint32_t>(down) << 16);
  const uint32_t up_bits = static_cast<uint32_t>(up) << 16;
  // The upper neighbour may be infinity (rounding past the largest finite).
  const double hi = (up_bits & 0x7F800000u) == 0x7F800000u
                        ? std::copysign(std::ldexp(1.0, 128), v)
                        : static_cast<double>(std::bit_cast<float>(up_bits));
  const double dlo = std::abs(v - lo), dhi = std::abs(hi - v);
  if (dlo < dhi) return down;
  if (dhi < dlo) return up;
  return (down & 1u) == 0 ? down : up;
}

}  // namespace

TEST_CASE("gpu convert: float32 and float16 are bit-exact with the daemon's output",
          "[gpu][convert]") {
  // 256 × 3 pixels: channel c of column x holds (x + 85 c + 40 y) % 256, so
  // every channel holds every value; a lossless BMP, decoded at full size.
  const int w = 256, h = 3;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) rgb[(y * w + x) * 3 + c] = (x + 85 * c + 40 * y) % 256;
    }
  }
  const std::vector<uint8_t> image = Bmp(w, h, rgb);
  SampleTransformer t;
  struct Norm {
    std::array<float, 3> mean, std;
  };
  const Norm norms[] = {{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}},
                        {{0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}},
                        {{0.0f, 0.0f, 0.0f}, {1.0f, 1.0f, 1.0f}},
                        {{-3.25f, 0.001f, 2.0f}, {0.0071f, 13.0f, 0.3333f}}};
  for (const Norm& norm : norms) {
    for (const Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
      TransformSpec spec;
      spec.output_width = w;
      spec.output_height = h;
      spec.layout = layout;
      spec.mean = norm.mean;
      spec.std = norm.std;
      const std::vector<uint8_t> u8 = Run(t, image, spec, w, h);
      const ConvertParams p = ParamsFor(spec, u8.size());
      // The daemon's uint8 output holds every value in every channel.
      std::array<std::array<bool, 256>, 3> seen{};
      for (uint64_t i = 0; i < u8.size(); ++i) seen[ChannelOf(i, p)][u8[i]] = true;
      for (int c = 0; c < 3; ++c) {
        for (int v = 0; v < 256; ++v) REQUIRE(seen[c][v]);
      }
      spec.dtype = DType::kFloat32;
      const std::vector<uint8_t> f32 = Run(t, image, spec, w, h);
      spec.dtype = DType::kFloat16;
      const std::vector<uint8_t> f16 = Run(t, image, spec, w, h);
      std::vector<uint8_t> mine32(f32.size()), mine16(f16.size());
      ConvertOnHost(mine32.data(), u8.data(), DeviceDType::kFloat32, p);
      ConvertOnHost(mine16.data(), u8.data(), DeviceDType::kFloat16, p);
      INFO("layout " << (layout == Layout::kNHWC ? "NHWC" : "NCHW") << " mean " << norm.mean[0]);
      REQUIRE(mine32 == f32);
      REQUIRE(mine16 == f16);
    }
  }
}

TEST_CASE("gpu convert: HalfBits equals the daemon's FloatToHalf", "[gpu][convert]") {
  const float specials[] = {0.0f,
                            -0.0f,
                            1.0f,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            -65520.0f,
                            std::ldexp(1.0f, -14),
                            std::ldexp(1.0f, -24),
                            std::ldexp(1.0f, -25),
                            std::ldexp(3.0f, -26),
                            std::ldexp(1023.5f, -24),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max()};
  for (float f : specials) {
    INFO(f);
    REQUIRE(HalfBits(f) == FloatToHalf(f));
  }
  // Every exponent, and every mantissa pattern near the rounding points.
  uint64_t mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 251) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (HalfBits(f) != FloatToHalf(f)) ++mismatches;
  }
  // At every exponent, mantissas at and next to the normal rounding point.
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t e = 0; e < 256; ++e) {
      for (uint32_t k = 0; k < 1024; ++k) {
        for (uint32_t r : {0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
          const float f = std::bit_cast<float>(sign | (e << 23) | (k << 13) | r);
          if (HalfBits(f) != FloatToHalf(f)) ++mismatches;
        }
      }
    }
  }
  // The subnormal halves and the boundary to normal ones, every third pattern.
  for (uint32_t bits = 101u << 23; bits < 114u << 23; bits += 3) {
    const float f = std::bit_cast<float>(bits);
    if (HalfBits(f) != FloatToHalf(f)) ++mismatches;
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("gpu convert: bfloat16 rounds to nearest even and keeps NaN", "[gpu][convert]") {
  CHECK(BFloat16Bits(0.0f) == 0x0000);
  CHECK(BFloat16Bits(-0.0f) == 0x8000);
  CHECK(BFloat16Bits(1.0f) == 0x3F80);
  CHECK(BFloat16Bits(-2.0f) == 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  CHECK(BFloat16Bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  // 1 + 3 × 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  CHECK(BFloat16Bits(1.0f + std::ldexp(3.0f, -8)) == 0x3F82);
  CHECK(BFloat16Bits(std::numeric_limits<float>::max()) == 0x7F80);  // rounds to infinity
  CHECK(BFloat16Bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  const uint16_t nan = BFloat16Bits(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7F80) == 0x7F80);
  CHECK((nan & 0x007F) != 0);
  // A NaN whose payload sits only in the low 16 bits must not become infinity.
  const uint16_t low_nan = BFloat16Bits(std::bit_cast<float>(0x7F800001u));
  CHECK((low_nan & 0x7F80) == 0x7F80);
  CHECK((low_nan & 0x007F) != 0);
  CHECK((BFloat16Bits(std::bit_cast<float>(0xFF800001u)) & 0x8000) != 0);
  uint64_t mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 251) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    if (BFloat16Bits(f) != BFloat16Reference(f)) ++mismatches;
  }
  // Exact ties and their neighbours at every exponent.
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t top = 0; top < 128; ++top) {
      for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) {
        const float f = std::bit_cast<float>((e << 23) | (top << 16) | low);
        if (BFloat16Bits(f) != BFloat16Reference(f)) ++mismatches;
      }
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("gpu convert: channel index for NCHW and NHWC", "[gpu][convert]") {
  ConvertParams p;
  p.channels = 3;
  p.plane = 7;  // odd plane: 7 pixels
  p.elements = 2 * 3 * 7;
  p.channels_last = false;
  for (uint64_t n = 0; n < 2; ++n) {
    for (uint32_t c = 0; c < 3; ++c) {
      for (uint64_t px = 0; px < 7; ++px) REQUIRE(ChannelOf((n * 3 + c) * 7 + px, p) == c);
    }
  }
  p.channels_last = true;
  for (uint64_t px = 0; px < 14; ++px) {
    for (uint32_t c = 0; c < 3; ++c) REQUIRE(ChannelOf(px * 3 + c, p) == c);
  }
  p.channels = 1;
  for (uint64_t i = 0; i < 20; ++i) REQUIRE(ChannelOf(i, p) == 0);
}

TEST_CASE("gpu convert: the grid-stride launch covers every element exactly once",
          "[gpu][convert]") {
  REQUIRE(ConvertGeometry(0).blocks == 0);
  for (const uint32_t max_blocks : {kConvertMaxBlocks, 1u, 3u}) {
    for (const uint64_t n :
         {uint64_t{1}, uint64_t{7}, uint64_t{255}, uint64_t{256}, uint64_t{257}, uint64_t{65537},
          uint64_t{1000003}, uint64_t{kConvertThreads} * kConvertMaxBlocks + 1}) {
      const LaunchGeometry g = ConvertGeometry(n, max_blocks);
      INFO("n " << n << " max_blocks " << max_blocks);
      REQUIRE(g.blocks >= 1);
      REQUIRE(g.blocks <= max_blocks);
      REQUIRE(g.threads == kConvertThreads);
      // No more blocks than there are elements to give them.
      REQUIRE(static_cast<uint64_t>(g.blocks - 1) * g.threads < n);
      std::vector<uint8_t> hits(n, 0);
      const uint64_t stride = ElementStride(g.blocks, g.threads);
      for (uint32_t b = 0; b < g.blocks; ++b) {
        for (uint32_t t = 0; t < g.threads; ++t) {
          for (uint64_t i = FirstElement(b, t, g.threads); i < n; i += stride) ++hits[i];
        }
      }
      for (uint64_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
    }
  }
}

TEST_CASE("gpu convert: specs are checked", "[gpu][convert]") {
  ConvertSpec s;
  s.elements = 3 * 4;
  s.plane = 4;
  REQUIRE(ValidateConvertSpec(s).ok());
  s.channels = 0;
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.channels = 4;
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.channels = 3;
  s.plane = 0;
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.plane = 5;  // 12 is not a multiple of 15
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.plane = 4;
  s.std[1] = 0.0f;
  const absl::Status zero_std = ValidateConvertSpec(s);
  CHECK(absl::IsInvalidArgument(zero_std));
  CHECK(zero_std.message().find("std[1]") != std::string::npos);
  s.std[1] = 0.5f;
  s.mean[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.mean[2] = 0.5f;
  s.channels_last = true;
  s.elements = 13;  // not whole pixels
  CHECK(absl::IsInvalidArgument(ValidateConvertSpec(s)));
  s.elements = 15;
  CHECK(ValidateConvertSpec(s).ok());
  CHECK(DeviceDTypeBytes(DeviceDType::kFloat32) == 4);
  CHECK(DeviceDTypeBytes(DeviceDType::kBFloat16) == 2);
  CHECK(std::string(DeviceDTypeName(DeviceDType::kBFloat16)) == "bfloat16");
}

}  // namespace conveyor::gpu
