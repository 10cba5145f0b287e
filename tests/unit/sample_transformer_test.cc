// SampleTransformer: layouts, dtypes and flip agree with each other,
// determinism, the DCT-scale choice, float16 rounding, and errors.
// (Agreement with torchvision is tests/python/test_decode_vs_pil.py.)
#include "core/decode/sample_transformer.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

std::vector<uint8_t> RunCrop(SampleTransformer& t, const std::vector<uint8_t>& jpeg,
                             const TransformSpec& spec, const CropBox& box, bool flip, int d = 1) {
  std::vector<uint8_t> out(SampleBytes(spec));
  const absl::Status s = t.RunCrop(jpeg, spec, box, flip, d, out.data());
  INFO(s.ToString());
  REQUIRE(s.ok());
  return out;
}

template <typename T>
std::vector<T> As(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

}  // namespace

TEST_CASE("sample transformer: layouts dtypes and flip agree", "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(300, 200, 5);
  SampleTransformer t;
  TransformSpec spec;
  spec.output_height = 50;
  spec.output_width = 70;
  const CropBox box{10, 20, 150, 230};
  const int h = 50, w = 70, plane = h * w;
  const std::vector<uint8_t> nchw = RunCrop(t, jpeg, spec, box, false);
  const std::vector<uint8_t> nchw_flip = RunCrop(t, jpeg, spec, box, true);
  spec.layout = Layout::kNHWC;
  const std::vector<uint8_t> nhwc = RunCrop(t, jpeg, spec, box, false);
  const std::vector<uint8_t> nhwc_flip = RunCrop(t, jpeg, spec, box, true);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const uint8_t v = nchw[c * plane + y * w + x];
        REQUIRE(nhwc[(y * w + x) * 3 + c] == v);
        REQUIRE(nchw_flip[c * plane + y * w + (w - 1 - x)] == v);
        REQUIRE(nhwc_flip[(y * w + (w - 1 - x)) * 3 + c] == v);
      }
    }
  }
  spec.dtype = DType::kFloat32;
  const std::vector<float> f32 = As<float>(RunCrop(t, jpeg, spec, box, true));
  spec.dtype = DType::kFloat16;
  const std::vector<uint16_t> f16 = As<uint16_t>(RunCrop(t, jpeg, spec, box, true));
  for (int i = 0; i < plane * 3; ++i) {
    const int c = i % 3;
    const float expect = (static_cast<float>(nhwc_flip[i]) / 255.0f - spec.mean[c]) / spec.std[c];
    REQUIRE(f32[i] == expect);
    REQUIRE(f16[i] == FloatToHalf(expect));
  }
}

TEST_CASE("sample transformer: SIMD and portable paths give identical samples", "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(413, 297, 12);
  SampleTransformer simd(true), portable(false);
  if (!simd.simd()) {
    WARN("CPU without AVX2: only the portable kernels run here");
  }
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    for (DType dtype : {DType::kUint8, DType::kFloat32, DType::kFloat16}) {
      TransformSpec spec;
      spec.layout = layout;
      spec.dtype = dtype;
      spec.output_height = 97;
      spec.output_width = 131;
      for (const CropBox& box : {CropBox{0, 0, 297, 413}, CropBox{13, 27, 40, 50}}) {
        for (bool flip : {false, true}) {
          CHECK(RunCrop(simd, jpeg, spec, box, flip, 0) ==
                RunCrop(portable, jpeg, spec, box, flip, 0));
        }
      }
    }
  }
}

TEST_CASE("sample transformer: Run is deterministic per Rng and draws crop then flip",
          "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(320, 240, 6);
  SampleTransformer t1, t2;
  TransformSpec spec;
  std::vector<uint8_t> a(SampleBytes(spec)), b(SampleBytes(spec)), c(SampleBytes(spec));
  int flips = 0;
  for (uint64_t i = 0; i < 40; ++i) {
    Rng r1 = Rng::ForKeys(9, 1, i), r2 = Rng::ForKeys(9, 1, i);
    REQUIRE(t1.Run(jpeg, spec, r1, a.data()).ok());
    REQUIRE(t2.Run(jpeg, spec, r2, b.data()).ok());
    REQUIRE(a == b);
    // The same geometry given explicitly reproduces the sample.
    Rng r3 = Rng::ForKeys(9, 1, i);
    const CropBox box = RandomResizedCropBox(320, 240, spec, r3);
    const bool flip = r3.Bernoulli(spec.flip_probability);
    CHECK(t1.last().crop == box);
    CHECK(t1.last().flip == flip);
    REQUIRE(t2.RunCrop(jpeg, spec, box, flip, 0, c.data()).ok());
    REQUIRE(a == c);
    flips += flip;
  }
  CHECK(flips > 5);
  CHECK(flips < 35);
}

TEST_CASE("sample transformer: DCT scaling is used when the crop allows it", "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(1000, 800, 7);
  SampleTransformer t;
  TransformSpec spec;
  std::vector<uint8_t> out(SampleBytes(spec));
  REQUIRE(t.RunCrop(jpeg, spec, CropBox{0, 0, 800, 1000}, false, 0, out.data()).ok());
  CHECK(t.last().scale_denom == 2);  // 800 / 4 < 224 <= 800 / 2
  const PixelRegion r = t.last().decoded;
  CHECK(r.x0 == 0);
  CHECK(r.x1 == 500);
  CHECK(r.y1 == 400);
  REQUIRE(t.RunCrop(jpeg, spec, CropBox{100, 100, 300, 300}, false, 0, out.data()).ok());
  CHECK(t.last().scale_denom == 1);
  CHECK(t.last().decoded.x0 == 100);
  CHECK(t.last().decoded.y0 == 100);
  CHECK(t.last().decoded.x1 == 400);
  CHECK(t.last().decoded.y1 == 400);
  spec.dct_scaling = false;
  REQUIRE(t.RunCrop(jpeg, spec, CropBox{0, 0, 800, 1000}, false, 0, out.data()).ok());
  CHECK(t.last().scale_denom == 1);
  // Eval: 1000x800 -> 320x256, filter scale 3.125 -> d = 2.
  spec.dct_scaling = true;
  spec.mode = AugmentMode::kEval;
  Rng rng(1);
  REQUIRE(t.Run(jpeg, spec, rng, out.data()).ok());
  CHECK(t.last().scale_denom == 2);
  CHECK(t.last().window == EvalWindow{320, 256, 16, 48});
  CHECK(rng.NextU64() == Rng(1).NextU64());  // eval draws nothing
}

TEST_CASE("sample transformer: DCT-scaled output stays close to the full-size path",
          "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(1000, 900, 8);
  SampleTransformer t;
  TransformSpec spec;
  spec.layout = Layout::kNHWC;
  const CropBox box{50, 60, 850, 900};
  const std::vector<uint8_t> full = RunCrop(t, jpeg, spec, box, false, 1);
  for (int d : {2, 4}) {
    const std::vector<uint8_t> scaled = RunCrop(t, jpeg, spec, box, false, d);
    double sum = 0;
    for (size_t i = 0; i < full.size(); ++i) sum += std::abs(full[i] - scaled[i]);
    INFO("d " << d << " mean abs diff " << sum / full.size());
    CHECK(sum / full.size() < 4.0);  // noise image; natural images: see bench/README.md
  }
}

TEST_CASE("sample transformer: float16 conversion rounds to nearest even", "[transform]") {
  CHECK(FloatToHalf(0.0f) == 0x0000);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(FloatToHalf(1.0f) == 0x3C00);
  CHECK(FloatToHalf(-2.0f) == 0xC000);
  CHECK(FloatToHalf(65504.0f) == 0x7BFF);
  CHECK(FloatToHalf(65519.0f) == 0x7BFF);
  CHECK(FloatToHalf(65520.0f) == 0x7C00);
  CHECK(FloatToHalf(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK((FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF) > 0x7C00);
  CHECK(FloatToHalf(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(FloatToHalf(std::ldexp(1.0f, -25)) == 0x0000);         // tie -> even (0)
  CHECK(FloatToHalf(std::ldexp(3.0f, -26)) == 0x0001);         // 0.75 ulp -> 1
  CHECK(FloatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie -> even
  CHECK(FloatToHalf(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // tie -> even (up)
  // Against the compiler's _Float16 conversion (round to nearest even) over a
  // spread of bit patterns covering every exponent.
  int mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 7919) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    if (std::bit_cast<uint16_t>(h) != FloatToHalf(f)) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("sample transformer: bad input and bad specs are errors then it carries on",
          "[transform]") {
  const std::vector<uint8_t> jpeg = testing::EncodeNoiseJpeg(120, 90, 9);
  SampleTransformer t;
  TransformSpec spec;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(1);
  CHECK(absl::IsInvalidArgument(t.Run({}, spec, rng, out.data())));
  const std::vector<uint8_t> cut(jpeg.begin(), jpeg.begin() + jpeg.size() / 2);
  CHECK(absl::IsDataLoss(t.Run(cut, spec, rng, out.data())));
  spec.max_pixels = 100;
  const absl::Status big = t.Run(jpeg, spec, rng, out.data());
  CHECK(big.message() == "image 120x90 exceeds max_pixels 100");
  spec = TransformSpec();
  spec.std[1] = 0;
  CHECK(absl::IsInvalidArgument(t.Run(jpeg, spec, rng, out.data())));
  spec = TransformSpec();
  CHECK(
      absl::IsInvalidArgument(t.RunCrop(jpeg, spec, CropBox{0, 0, 91, 10}, false, 0, out.data())));
  CHECK(
      absl::IsInvalidArgument(t.RunCrop(jpeg, spec, CropBox{0, 0, 10, 10}, false, 3, out.data())));
  CHECK(t.Run(jpeg, spec, rng, out.data()).ok());
}

TEST_CASE("vertical flip and grayscale: the plain output mirrored and made grey, after the crop",
          "[decode][augment]") {
  const std::vector<uint8_t> image = testing::EncodeNoiseJpeg(120, 90, 5);
  TransformSpec plain;
  plain.output_height = 20;
  plain.output_width = 28;
  plain.layout = Layout::kNHWC;
  TransformSpec ops = plain;
  ops.vflip_probability = 1;
  ops.grayscale_probability = 1;
  SampleTransformer t;
  std::vector<uint8_t> a(SampleBytes(plain)), b(SampleBytes(ops));
  Rng r1 = Rng::ForKeys(1, 0, 7), r2 = Rng::ForKeys(1, 0, 7);
  REQUIRE(t.Run(image, plain, r1, a.data()).ok());
  const CropBox crop = t.last().crop;
  REQUIRE(t.Run(image, ops, r2, b.data()).ok());
  CHECK(t.last().crop == crop);  // the crop and flip draws come first, unchanged
  CHECK(t.last().vflip);
  CHECK(t.last().grayscale);
  CHECK(t.LastGeometry()->vflip);
  for (int y = 0; y < 20; ++y) {
    for (int x = 0; x < 28; ++x) {
      const uint8_t* p = &a[(static_cast<size_t>(19 - y) * 28 + x) * 3];
      const uint8_t l =
          static_cast<uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
      const uint8_t* q = &b[(static_cast<size_t>(y) * 28 + x) * 3];
      INFO("y " << y << " x " << x);
      REQUIRE((q[0] == l && q[1] == l && q[2] == l));
    }
  }
}

TEST_CASE("a mask is sampled nearest-neighbour through the image's crop, resize and flip",
          "[decode][mask]") {
  const int w = 97, h = 61;
  const std::vector<uint8_t> image = testing::EncodeNoiseJpeg(w, h, 3);
  std::vector<uint8_t> gray(static_cast<size_t>(w) * h);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = static_cast<uint8_t>((i * 37) % 251);
  const std::vector<uint8_t> mask = testing::CompressJpeg(gray, w, h, 1, 95);
  // The reference: the mask decoded whole, sampled by the rule.
  JpegDecoder full;
  REQUIRE(full.ReadHeader(mask, DecodeLimits()).ok());
  RgbImage decoded;
  REQUIRE(full.DecodeImage(1, &decoded).ok());

  TransformSpec spec;
  spec.output_height = 24;
  spec.output_width = 32;
  SampleTransformer t;
  std::vector<uint8_t> out(SampleBytes(spec));
  const CropBox crop{5, 7, 40, 50};
  for (bool flip : {false, true}) {
    REQUIRE(t.RunCrop(image, spec, crop, flip, 1, out.data()).ok());
    const SampleGeometry g = *t.LastGeometry();
    std::vector<uint8_t> got(24 * 32);
    REQUIRE(t.RunMask(mask, spec, g, got.data()).ok());
    CHECK(t.last().crop == crop);  // last() still describes the image
    for (int y = 0; y < 24; ++y) {
      for (int x = 0; x < 32; ++x) {
        const int sy = crop.top + static_cast<int>(std::floor((y + 0.5) * crop.height / 24));
        const int sx = crop.left + static_cast<int>(std::floor((x + 0.5) * crop.width / 32));
        const uint8_t want = decoded.pixels[(static_cast<size_t>(sy) * w + sx) * 3];
        INFO("flip " << flip << " y " << y << " x " << x);
        REQUIRE(got[y * 32 + (flip ? 31 - x : x)] == want);
      }
    }
  }
  // A mask of another size than its image is the sample's error.
  const std::vector<uint8_t> small = testing::CompressJpeg(gray, 60, 40, 1, 95);
  std::vector<uint8_t> got(24 * 32);
  const absl::Status st = t.RunMask(small, spec, *t.LastGeometry(), got.data());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()) == "the mask is 60x40, its image 97x61");
}

}  // namespace conveyor
