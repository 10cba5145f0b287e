#include "core/decode/color_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <utility>

namespace conveyor {
namespace {

constexpr int kChannels = 3;

using Lut = std::array<uint8_t, 256>;
using ChannelLuts = std::array<Lut, kChannels>;
using Histogram = std::array<uint64_t, 256>;
using ChannelHistograms = std::array<Histogram, kChannels>;

bool HasPixels(const RgbView& image) {
  return image.data != nullptr && image.width > 0 && image.height > 0;
}

// A factor Image.blend can take: it narrows the factor to float.
bool IsBlendFactor(double factor) {
  return std::isfinite(factor) && std::fabs(factor) <= std::numeric_limits<float>::max();
}

uint8_t Clip8(int64_t value) {
  return static_cast<uint8_t>(value <= 0 ? 0 : value >= 255 ? 255 : value);
}

// convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded.
uint8_t Luma(const uint8_t* rgb) {
  const uint32_t sum = rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u;
  return static_cast<uint8_t>(sum >> 16);
}

Lut IdentityLut() {
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v);
  return lut;
}

void ApplyLut(RgbView image, const Lut& lut) {
  uint8_t* bytes = image.data;
  const size_t count = image.bytes();
  for (size_t i = 0; i < count; ++i) bytes[i] = lut[bytes[i]];
}

void ApplyChannelLuts(RgbView image, const ChannelLuts& luts) {
  uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) {
    for (int c = 0; c < kChannels; ++c) pixel[c] = luts[c][pixel[c]];
  }
}

ChannelHistograms CountChannels(RgbView image) {
  ChannelHistograms histograms{};
  const uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) {
    for (int c = 0; c < kChannels; ++c) ++histograms[c][pixel[c]];
  }
  return histograms;
}

// ImagingBlend(degenerate, image, alpha) for one byte pair: the float32
// value degenerate + alpha * (value - degenerate), clamped to [0, 255] and
// truncated. (Pillow skips the clamp for 0 <= alpha <= 1, where it cannot
// matter.) The product of a float and a byte difference is exact in double,
// so narrowing it gives the float product, and the sum is narrowed once:
// the float arithmetic exactly, with nothing a compiler could fuse.
class Blend {
 public:
  explicit Blend(double factor) {
    const double alpha = static_cast<float>(factor);
    for (int d = -255; d <= 255; ++d) products_[d + 255] = static_cast<float>(alpha * d);
  }

  uint8_t operator()(int degenerate, int value) const {
    const float product = products_[value - degenerate + 255];
    const float sum = static_cast<float>(degenerate + static_cast<double>(product));
    if (sum <= 0.0f) return 0;
    if (sum >= 255.0f) return 255;
    return static_cast<uint8_t>(sum);
  }

 private:
  std::array<float, 511> products_;
};

// The blend of a constant degenerate image, as a LUT over the image's bytes.
Lut BlendLut(int degenerate, const Blend& blend) {
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = blend(degenerate, v);
  return lut;
}

// ImageEnhance.Contrast's grey: int(ImageStat mean of convert("L") + 0.5).
int MeanLuma(RgbView image) {
  uint64_t sum = 0;
  const uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) sum += Luma(pixel);
  const double mean = static_cast<double>(sum) / static_cast<double>(pixels);
  return static_cast<int>(mean + 0.5);
}

// PIL's SMOOTH filter (ImagingFilter3x3 with the weights 1 1 1 / 1 5 1 /
// 1 1 1, each divided by 13 in float32): per byte, 0.5 plus the row below,
// the row itself and the row above, each summed left to right, in float32.
class Smooth {
 public:
  Smooth() {
    const double edge = 1.0f / 13.0f;
    const double centre = 5.0f / 13.0f;
    for (int v = 0; v < 256; ++v) {
      edge_[v] = static_cast<float>(v * edge);
      centre_[v] = static_cast<float>(v * centre);
    }
  }

  // The smoothed byte at offset i of a row (not a border pixel).
  uint8_t At(const uint8_t* above, const uint8_t* row, const uint8_t* below, size_t i) const {
    float sum = 0.5f;
    sum += (edge_[below[i - kChannels]] + edge_[below[i]]) + edge_[below[i + kChannels]];
    sum += (edge_[row[i - kChannels]] + centre_[row[i]]) + edge_[row[i + kChannels]];
    sum += (edge_[above[i - kChannels]] + edge_[above[i]]) + edge_[above[i + kChannels]];
    if (sum <= 0.0f) return 0;
    if (sum >= 255.0f) return 255;
    return static_cast<uint8_t>(sum);
  }

 private:
  std::array<float, 256> edge_;
  std::array<float, 256> centre_;
};

// One row of Image.blend(smoothed, image, factor); the border pixels of the
// row are left as they are (blend(x, x) is x).
void SharpenRow(const uint8_t* above, const uint8_t* row, const uint8_t* below, int width,
                const Smooth& smooth, const Blend& blend, uint8_t* out) {
  const size_t end = static_cast<size_t>(width - 1) * kChannels;
  for (size_t i = kChannels; i < end; ++i) out[i] = blend(smooth.At(above, row, below, i), row[i]);
}

// a * b rounded to double by itself: the volatile store is observable, so a
// compiler allowed to contract a * b + c into one fused multiply-add (GCC's
// default where the target has FMA) still rounds the product first, as
// Pillow's and Python's unfused arithmetic does.
double UnfusedProduct(double a, double b) {
  volatile double product = a * b;
  return product;
}

struct Hsv {
  uint8_t h;
  uint8_t s;
  uint8_t v;
};

// Pillow's rgb2hsv_row, with its mix of float and double arithmetic.
Hsv RgbToHsv(const uint8_t* rgb) {
  const uint8_t r = rgb[0];
  const uint8_t g = rgb[1];
  const uint8_t b = rgb[2];
  const uint8_t max = std::max(r, std::max(g, b));
  const uint8_t min = std::min(r, std::min(g, b));
  if (min == max) return Hsv{0, 0, max};
  const float range = static_cast<float>(max - min);
  const float s = range / static_cast<float>(max);
  const float rc = static_cast<float>(max - r) / range;
  const float gc = static_cast<float>(max - g) / range;
  const float bc = static_cast<float>(max - b) / range;
  float h;
  if (r == max) {
    h = bc - gc;
  } else if (g == max) {
    h = static_cast<float>(2.0 + rc - bc);
  } else {
    h = static_cast<float>(4.0 + gc - rc);
  }
  h = static_cast<float>(std::fmod(h / 6.0 + 1.0, 1.0));
  return Hsv{Clip8(static_cast<int>(h * 255.0)), Clip8(static_cast<int>(s * 255.0)), max};
}

// Pillow's hsv2rgb. Its float product fs * f is formed exactly in double and
// narrowed, its double product fs * (1 - f) kept unfused.
void HsvToRgb(Hsv hsv, uint8_t* rgb) {
  const uint8_t v = hsv.v;
  if (hsv.s == 0) {
    rgb[0] = rgb[1] = rgb[2] = v;
    return;
  }
  const double sector = static_cast<float>(hsv.h) * 6.0 / 255.0;
  const int i = static_cast<int>(std::floor(sector));
  const float f = static_cast<float>(sector - static_cast<float>(i));
  const float fs = static_cast<float>(static_cast<float>(hsv.s) / 255.0);
  const float fs_f = static_cast<float>(static_cast<double>(fs) * f);
  const uint8_t p = Clip8(static_cast<int>(std::round(static_cast<float>(v) * (1.0 - fs))));
  const uint8_t q = Clip8(static_cast<int>(std::round(static_cast<float>(v) * (1.0 - fs_f))));
  const uint8_t t = Clip8(
      static_cast<int>(std::round(static_cast<float>(v) * (1.0 - UnfusedProduct(fs, 1.0 - f)))));
  switch (i % 6) {
    case 0: rgb[0] = v, rgb[1] = t, rgb[2] = p; break;
    case 1: rgb[0] = q, rgb[1] = v, rgb[2] = p; break;
    case 2: rgb[0] = p, rgb[1] = v, rgb[2] = t; break;
    case 3: rgb[0] = p, rgb[1] = q, rgb[2] = v; break;
    case 4: rgb[0] = t, rgb[1] = p, rgb[2] = v; break;
    default: rgb[0] = v, rgb[1] = p, rgb[2] = q; break;
  }
}

// ImageOps.autocontrast's LUT for one channel (cutoff 0, no ignore).
Lut AutoContrastLut(const Histogram& histogram) {
  int lo = 0;
  while (lo < 256 && histogram[lo] == 0) ++lo;
  int hi = 255;
  while (hi >= 0 && histogram[hi] == 0) --hi;
  if (hi <= lo) return IdentityLut();
  const double scale = 255.0 / (hi - lo);
  const double offset = -lo * scale;
  Lut lut;
  for (int v = 0; v < 256; ++v)
    lut[v] = Clip8(static_cast<int64_t>(UnfusedProduct(v, scale) + offset));
  return lut;
}

// ImageOps.equalize's LUT for one channel.
Lut EqualizeLut(const Histogram& histogram) {
  int used_values = 0;
  uint64_t total = 0;
  uint64_t top_count = 0;
  for (uint64_t count : histogram) {
    if (count == 0) continue;
    ++used_values;
    total += count;
    top_count = count;
  }
  if (used_values <= 1) return IdentityLut();
  const uint64_t step = (total - top_count) / 255;
  if (step == 0) return IdentityLut();
  Lut lut;
  uint64_t n = step / 2;
  for (int v = 0; v < 256; ++v) {
    lut[v] = static_cast<uint8_t>(std::min<uint64_t>(n / step, 255));
    n += histogram[v];
  }
  return lut;
}

bool IsOddKernel(int size) { return size >= 1 && size % 2 == 1; }

bool IsBlurSigma(double sigma) {
  return std::isfinite(sigma) && sigma <= std::numeric_limits<float>::max() &&
         static_cast<float>(sigma) > 0.0f;
}

// torchvision's _get_gaussian_kernel1d in float32: exp(-0.5 (x / sigma)^2)
// at x = -size/2 .. size/2, divided by its sum.
void GaussianTaps(int size, double sigma, float* taps) {
  const int half = size / 2;
  const float sigma_f = static_cast<float>(sigma);
  float sum = 0.0f;
  for (int i = 0; i < size; ++i) {
    const float x = static_cast<float>(i - half) / sigma_f;
    taps[i] = std::exp(-0.5f * (x * x));
    sum += taps[i];
  }
  for (int i = 0; i < size; ++i) taps[i] /= sum;
}

// torch's "reflect" padding: -1 -> 1, n -> n - 2 (valid for |overhang| < n).
int Reflect(int i, int n) {
  if (i < 0) return -i;
  if (i >= n) return 2 * (n - 1) - i;
  return i;
}

// One row filtered horizontally: the row reflect-padded into `padded`
// (3 (width + taps - 1) floats), then convolved into `out` (3 width floats).
void BlurRowHorizontally(const uint8_t* row, int width, const float* taps, int size, float* padded,
                         float* out) {
  const int half = size / 2;
  for (int x = -half; x < width + half; ++x) {
    const uint8_t* pixel = row + static_cast<size_t>(Reflect(x, width)) * kChannels;
    float* padded_pixel = padded + static_cast<size_t>(x + half) * kChannels;
    for (int c = 0; c < kChannels; ++c) padded_pixel[c] = pixel[c];
  }
  const size_t count = static_cast<size_t>(width) * kChannels;
  for (size_t i = 0; i < count; ++i) out[i] = taps[0] * padded[i];
  for (int k = 1; k < size; ++k) {
    const float tap = taps[k];
    const float* shifted = padded + static_cast<size_t>(k) * kChannels;
    for (size_t i = 0; i < count; ++i) out[i] += tap * shifted[i];
  }
}

// Rounds half to even (torch.round) and narrows to a byte: for
// 0 <= v < 2^23, (v + 2^23) - 2^23 is v rounded in the default rounding mode.
uint8_t RoundToByte(float value) {
  constexpr float kMagic = 8388608.0f;
  const float clamped = std::min(std::max(value, 0.0f), 255.0f);
  return static_cast<uint8_t>((clamped + kMagic) - kMagic);
}

// The blur's working memory, carved out of the caller's scratch vector:
// a ring of `kernel_height` horizontally filtered rows (row j in slot
// j % kernel_height), a padded source row, an output row and the taps.
struct BlurBuffers {
  float* ring;
  float* padded;
  float* sums;
  float* taps_x;
  float* taps_y;
};

BlurBuffers CarveBlurBuffers(int width, int kernel_width, int kernel_height,
                             std::vector<float>* scratch) {
  const size_t row = static_cast<size_t>(width) * kChannels;
  const size_t ring = row * static_cast<size_t>(kernel_height);
  const size_t padded = static_cast<size_t>(width + kernel_width - 1) * kChannels;
  scratch->resize(ring + padded + row + static_cast<size_t>(kernel_width + kernel_height));
  BlurBuffers buffers;
  buffers.ring = scratch->data();
  buffers.padded = buffers.ring + ring;
  buffers.sums = buffers.padded + padded;
  buffers.taps_x = buffers.sums + row;
  buffers.taps_y = buffers.taps_x + kernel_width;
  return buffers;
}

// Output row y from the ring: the vertical taps over the reflected rows.
void BlurRowVertically(const BlurBuffers& buffers, int y, int height, int width, int kernel_height,
                       uint8_t* out) {
  const size_t count = static_cast<size_t>(width) * kChannels;
  const int half = kernel_height / 2;
  for (int k = 0; k < kernel_height; ++k) {
    const int source = Reflect(y + k - half, height);
    const float* filtered = buffers.ring + static_cast<size_t>(source % kernel_height) * count;
    const float tap = buffers.taps_y[k];
    if (k == 0) {
      for (size_t i = 0; i < count; ++i) buffers.sums[i] = tap * filtered[i];
    } else {
      for (size_t i = 0; i < count; ++i) buffers.sums[i] += tap * filtered[i];
    }
  }
  for (size_t i = 0; i < count; ++i) out[i] = RoundToByte(buffers.sums[i]);
}

}  // namespace

void AdjustBrightness(RgbView image, double factor) {
  if (!HasPixels(image) || !IsBlendFactor(factor)) return;
  ApplyLut(image, BlendLut(0, Blend(factor)));
}

void AdjustContrast(RgbView image, double factor) {
  if (!HasPixels(image) || !IsBlendFactor(factor)) return;
  ApplyLut(image, BlendLut(MeanLuma(image), Blend(factor)));
}

void AdjustSaturation(RgbView image, double factor) {
  if (!HasPixels(image) || !IsBlendFactor(factor)) return;
  const Blend blend(factor);
  uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) {
    const int grey = Luma(pixel);
    for (int c = 0; c < kChannels; ++c) pixel[c] = blend(grey, pixel[c]);
  }
}

void AdjustHue(RgbView image, double hue_factor) {
  if (!HasPixels(image) || !(hue_factor >= -0.5 && hue_factor <= 0.5)) return;
  // np.uint8(hue_factor * 255): truncated towards zero, then the low byte.
  const int shift = static_cast<int>(static_cast<int64_t>(hue_factor * 255.0) & 0xff);
  uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) {
    Hsv hsv = RgbToHsv(pixel);
    hsv.h = static_cast<uint8_t>(hsv.h + shift);
    HsvToRgb(hsv, pixel);
  }
}

void ToGrayscale(RgbView image) {
  if (!HasPixels(image)) return;
  uint8_t* pixel = image.data;
  const size_t pixels = image.bytes() / kChannels;
  for (size_t i = 0; i < pixels; ++i, pixel += kChannels) {
    pixel[0] = pixel[1] = pixel[2] = Luma(pixel);
  }
}

void AdjustSharpness(RgbView image, double factor, std::vector<uint8_t>* scratch) {
  if (!HasPixels(image) || !IsBlendFactor(factor) || scratch == nullptr) return;
  // PIL does not filter an image under 3x3, and its filter leaves the
  // outermost rows and columns as they are: there the blend is the identity.
  if (image.width < 3 || image.height < 3) return;
  const Blend blend(factor);
  const Smooth smooth;
  const size_t stride = image.stride();
  scratch->resize(2 * stride);
  // The source rows y - 1 and y, before row y is overwritten; row y + 1 is
  // still the source in the image.
  uint8_t* above = scratch->data();
  uint8_t* row = above + stride;
  std::memcpy(above, image.row(0), stride);
  for (int y = 1; y + 1 < image.height; ++y) {
    std::memcpy(row, image.row(y), stride);
    SharpenRow(above, row, image.row(y + 1), image.width, smooth, blend, image.row(y));
    std::swap(above, row);
  }
}

void Posterize(RgbView image, int bits) {
  if (!HasPixels(image) || bits < 0 || bits > 8) return;
  const int mask = ~((1 << (8 - bits)) - 1) & 0xff;
  Lut lut;
  for (int v = 0; v < 256; ++v) lut[v] = static_cast<uint8_t>(v & mask);
  ApplyLut(image, lut);
}

void Solarize(RgbView image, double threshold) {
  if (!HasPixels(image)) return;
  Lut lut;
  for (int v = 0; v < 256; ++v) {
    lut[v] = static_cast<uint8_t>(static_cast<double>(v) < threshold ? v : 255 - v);
  }
  ApplyLut(image, lut);
}

void AutoContrast(RgbView image) {
  if (!HasPixels(image)) return;
  const ChannelHistograms histograms = CountChannels(image);
  ChannelLuts luts;
  for (int c = 0; c < kChannels; ++c) luts[c] = AutoContrastLut(histograms[c]);
  ApplyChannelLuts(image, luts);
}

void Equalize(RgbView image) {
  if (!HasPixels(image)) return;
  const ChannelHistograms histograms = CountChannels(image);
  ChannelLuts luts;
  for (int c = 0; c < kChannels; ++c) luts[c] = EqualizeLut(histograms[c]);
  ApplyChannelLuts(image, luts);
}

void GaussianBlur(RgbView image, int kernel_width, int kernel_height, double sigma_x,
                  double sigma_y, std::vector<float>* scratch) {
  if (!HasPixels(image) || scratch == nullptr) return;
  if (!IsOddKernel(kernel_width) || !IsOddKernel(kernel_height)) return;
  if (kernel_width / 2 >= image.width || kernel_height / 2 >= image.height) return;
  if (!IsBlurSigma(sigma_x) || !IsBlurSigma(sigma_y)) return;
  const BlurBuffers buffers = CarveBlurBuffers(image.width, kernel_width, kernel_height, scratch);
  GaussianTaps(kernel_width, sigma_x, buffers.taps_x);
  GaussianTaps(kernel_height, sigma_y, buffers.taps_y);
  const size_t row_floats = image.stride();
  // Row j is filtered horizontally before output row j - kernel_height / 2
  // is written, so always from the source; rows y +- kernel_height / 2 are
  // in distinct ring slots.
  int next_source = 0;
  for (int y = 0; y < image.height; ++y) {
    const int last_needed = std::min(image.height - 1, y + kernel_height / 2);
    for (; next_source <= last_needed; ++next_source) {
      float* slot = buffers.ring + static_cast<size_t>(next_source % kernel_height) * row_floats;
      BlurRowHorizontally(image.row(next_source), image.width, buffers.taps_x, kernel_width,
                          buffers.padded, slot);
    }
    BlurRowVertically(buffers, y, image.height, image.width, kernel_height, image.row(y));
  }
}

}  // namespace conveyor
