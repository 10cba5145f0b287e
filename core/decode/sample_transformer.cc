#include "core/decode/sample_transformer.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/decode/color_ops.h"
#include "core/decode/image_format.h"
#include "core/decode/image_probe.h"
#include "core/decode/relaid_entropy_decoder.h"

namespace conveyor {

static_assert(JpegDecoder::kRowSlack >= Resampler::kReadPadding,
              "decoded rows must carry the resampler's read padding");
static_assert(FfmpegImageDecoder::kRowSlack >= Resampler::kReadPadding,
              "converted rows must carry the resampler's read padding");

int ChooseScaleDenom(double src_w, double src_h, int out_w, int out_h) {
  for (int d : {8, 4, 2}) {
    if (src_w >= static_cast<double>(d) * out_w && src_h >= static_cast<double>(d) * out_h) {
      return d;
    }
  }
  return 1;
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) {  // Inf or NaN (NaN stays a quiet NaN)
    return sign | (a > 0x7F800000u ? 0x7E00u : 0x7C00u);
  }
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 rounds to Inf
  if (a >= 0x38800000u) {                       // normal half (>= 2^-14)
    a -= 112u << 23;                            // rebias exponent 127 -> 15
    a += 0xFFFu + ((a >> 13) & 1u);             // round to nearest even
    return sign | static_cast<uint16_t>(a >> 13);
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25 rounds to zero
  // Subnormal half: value / 2^-24 rounded to nearest even.
  const int e = static_cast<int>(a >> 23);
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const int shift = 126 - e;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

namespace {

// Writes one finished RGB row into the sample in the requested layout and
// type, mirrored when flipping. Planar (NCHW) writes go to three rows.
template <typename T, typename Convert>
inline void WriteRow(const uint8_t* rgb, int width, int y, int height, bool planar, bool flip,
                     T* out, Convert convert) {
  const size_t plane = static_cast<size_t>(width) * height;
  if (planar) {
    T* r = out + static_cast<size_t>(y) * width;
    T* g = r + plane;
    T* b = g + plane;
    if (flip) {
      for (int x = 0, xo = width - 1; x < width; ++x, --xo) {
        r[xo] = convert(0, rgb[3 * x + 0]);
        g[xo] = convert(1, rgb[3 * x + 1]);
        b[xo] = convert(2, rgb[3 * x + 2]);
      }
    } else {
      for (int x = 0; x < width; ++x) {
        r[x] = convert(0, rgb[3 * x + 0]);
        g[x] = convert(1, rgb[3 * x + 1]);
        b[x] = convert(2, rgb[3 * x + 2]);
      }
    }
  } else {
    T* o = out + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const int xo = flip ? width - 1 - x : x;
      o[3 * xo + 0] = convert(0, rgb[3 * x + 0]);
      o[3 * xo + 1] = convert(1, rgb[3 * x + 1]);
      o[3 * xo + 2] = convert(2, rgb[3 * x + 2]);
    }
  }
}

// Byte-shuffle masks that gather channel c of 16 consecutive RGB pixels
// (48 bytes, three 16-byte loads) into one vector; `flip` reverses the pixel
// order. Index 0x80 yields zero, so the three shuffles are OR-ed together.
struct DeinterleaveMasks {
  alignas(16) uint8_t m[2][3][3][16];  // [flip][channel][input vector][byte]
  constexpr DeinterleaveMasks() : m() {
    for (int f = 0; f < 2; ++f) {
      for (int c = 0; c < 3; ++c) {
        for (int v = 0; v < 3; ++v) {
          for (int j = 0; j < 16; ++j) {
            const int pixel = f ? 15 - j : j;
            const int byte = 3 * pixel + c - 16 * v;
            m[f][c][v][j] = byte >= 0 && byte < 16 ? static_cast<uint8_t>(byte) : 0x80;
          }
        }
      }
    }
  }
};
constexpr DeinterleaveMasks kDeinterleave;

// Splits a packed RGB row into three planes (mirrored when flipping), 16
// pixels per step with SSSE3 shuffles; the tail is scalar.
__attribute__((target("avx2"))) void DeinterleaveRowSimd(const uint8_t* rgb, int width, bool flip,
                                                         uint8_t* r, uint8_t* g, uint8_t* b) {
  uint8_t* planes[3] = {r, g, b};
  const int f = flip ? 1 : 0;
  int x = 0;
  for (; x + 16 <= width; x += 16) {
    const __m128i in0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * x));
    const __m128i in1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * x + 16));
    const __m128i in2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * x + 32));
    const int at = flip ? width - 16 - x : x;
    for (int c = 0; c < 3; ++c) {
      const auto* mask = kDeinterleave.m[f][c];
      const __m128i v = _mm_or_si128(
          _mm_or_si128(
              _mm_shuffle_epi8(in0, _mm_load_si128(reinterpret_cast<const __m128i*>(mask[0]))),
              _mm_shuffle_epi8(in1, _mm_load_si128(reinterpret_cast<const __m128i*>(mask[1])))),
          _mm_shuffle_epi8(in2, _mm_load_si128(reinterpret_cast<const __m128i*>(mask[2]))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[c] + at), v);
    }
  }
  for (; x < width; ++x) {
    const int xo = flip ? width - 1 - x : x;
    r[xo] = rgb[3 * x];
    g[xo] = rgb[3 * x + 1];
    b[xo] = rgb[3 * x + 2];
  }
}

// One axis of a train crop decoded at 1/d: the crop [start, start + size) of a
// `full`-pixel axis. At d = 1 the resampler sees exactly the crop (PIL's
// img.crop(box).resize(...)); at d > 1 the crop edges fall between scaled
// pixels, so it sees the scaled pixels covering the crop and a fractional box.
void TrainAxis(int start, int size, int full, int d, int out, ResampleAxis* axis, int* origin) {
  axis->resized_size = out;
  axis->out_offset = 0;
  axis->out_size = out;
  if (d == 1) {
    *origin = start;
    axis->in_size = size;
    axis->box0 = 0;
    axis->box1 = size;
    return;
  }
  const int scaled_full = JpegDecoder::ScaledSize(full, d);
  const double f0 = static_cast<double>(start) / d;
  const double f1 = static_cast<double>(start + size) / d;
  const int o = static_cast<int>(std::floor(f0));
  const int e = std::min(static_cast<int>(std::ceil(f1)), scaled_full);
  *origin = o;
  axis->in_size = e - o;
  axis->box0 = f0 - o;
  axis->box1 = f1 - o;
}

// One axis of the eval window decoded at 1/d: the whole (scaled) axis is
// resized to `resized` pixels, of which [offset, offset + out) is kept.
void EvalAxis(int full, int d, int resized, int offset, int out, ResampleAxis* axis) {
  axis->in_size = JpegDecoder::ScaledSize(full, d);
  axis->box0 = 0;
  axis->box1 = d == 1 ? full : static_cast<double>(full) / d;
  axis->resized_size = resized;
  axis->out_offset = offset;
  axis->out_size = out;
}

}  // namespace

ImageOpsDraws DrawImageOps(const ImageOpsSpec& ops, Rng& rng) {
  ImageOpsDraws d;
  if (ops.padding > 0) {
    // RandomCrop.get_params: top, then left, each in [0, 2 × padding].
    const uint64_t span = 2 * static_cast<uint64_t>(ops.padding) + 1;
    d.pad_top = static_cast<int>(rng.Below(span));
    d.pad_left = static_cast<int>(rng.Below(span));
  }
  if (ops.jitter()) {
    d.jitter = rng.Bernoulli(ops.jitter_probability);
    if (d.jitter) {
      // torch.randperm(4) as a Fisher–Yates shuffle, then the factors.
      for (int i = 3; i > 0; --i) {
        std::swap(d.jitter_order[i], d.jitter_order[rng.Below(static_cast<uint64_t>(i) + 1)]);
      }
      auto draw = [&](double lo, double hi, double identity) {
        return lo == identity && hi == identity ? identity : rng.Uniform(lo, hi);
      };
      d.brightness = draw(ops.brightness_min, ops.brightness_max, 1);
      d.contrast = draw(ops.contrast_min, ops.contrast_max, 1);
      d.saturation = draw(ops.saturation_min, ops.saturation_max, 1);
      d.hue = draw(ops.hue_min, ops.hue_max, 0);
    }
  }
  if (ops.blur()) {
    d.blur = rng.Bernoulli(ops.blur_probability);
    if (d.blur) d.blur_sigma = rng.Uniform(ops.blur_sigma_min, ops.blur_sigma_max);
  }
  if (ops.trivial_augment()) {
    d.trivial_augment = true;
    d.trivial = DrawTrivialAugment(ops.trivial_augment_bins, rng);
  }
  return d;
}

std::string ImageOpsDrawsJson(const ImageOpsSpec& ops, const ImageOpsDraws& d) {
  std::vector<std::string> parts;
  if (ops.padding > 0) parts.push_back(absl::StrFormat("\"pad\":[%d,%d]", d.pad_top, d.pad_left));
  if (ops.jitter()) {
    parts.push_back(absl::StrFormat(
        "\"jitter\":{\"applied\":%s,\"order\":[%d,%d,%d,%d],\"brightness\":%.17g,"
        "\"contrast\":%.17g,\"saturation\":%.17g,\"hue\":%.17g}",
        d.jitter ? "true" : "false", d.jitter_order[0], d.jitter_order[1], d.jitter_order[2],
        d.jitter_order[3], d.brightness, d.contrast, d.saturation, d.hue));
  }
  if (ops.blur()) {
    parts.push_back(absl::StrFormat("\"blur\":{\"applied\":%s,\"sigma\":%.17g}",
                                    d.blur ? "true" : "false", d.blur_sigma));
  }
  if (ops.trivial_augment()) {
    parts.push_back(
        absl::StrFormat("\"trivial_augment\":{\"op\":\"%s\",\"bin\":%d,"
                        "\"magnitude\":%.17g}",
                        ToString(d.trivial.op), d.trivial.bin, d.trivial.magnitude));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ","), "}");
}

SampleTransformer::SampleTransformer() : SampleTransformer(true) {}

SampleTransformer::SampleTransformer(bool allow_simd) : resampler_(allow_simd) {}

SampleTransformer::~SampleTransformer() = default;

absl::Status SampleTransformer::Start(std::span<const uint8_t> bytes, const TransformSpec& spec) {
  if (absl::Status s = ValidateTransformSpec(spec); !s.ok()) return s;
  DecodeLimits limits;
  limits.max_pixels = spec.max_pixels;
  limits.max_memory = spec.max_decode_memory;
  limits.max_cpu_seconds = spec.max_decode_seconds;
  const char* format = ImageFormatName(bytes);
  // JPEG's SOI marker (as JpegDecoder checks it), or nothing: JpegDecoder
  // names the error.
  jpeg_ = bytes.empty() || (bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8);
  relaid_.reset();
  if (jpeg_) {
    absl::StatusOr<JpegHeader> header = decoder_.ReadHeader(bytes, limits);
    if (!header.ok()) return header.status();
    header_ = *header;
    bytes_ = bytes;
    limits_ = limits;
    if (header_.restart_interval > 0 && !header_.progressive && !header_.arithmetic) {
      // Restart intervals that tile the MCU rows (any baseline JPEG laid out
      // so, re-laid or not): crops decode from the intervals they cover.
      absl::StatusOr<RelaidLayout> layout = ParseRelaid(bytes);
      if (layout.ok()) relaid_ = std::move(*layout);
    }
  } else if (IsFfmpegImageFormat(format)) {
    if (ffmpeg_ == nullptr) ffmpeg_ = std::make_unique<FfmpegImageDecoder>();
    absl::StatusOr<ImageProbe> probe = ffmpeg_->ReadHeader(bytes, format, limits);
    if (!probe.ok()) return probe.status();
    header_ = JpegHeader();
    header_.width = probe->width;
    header_.height = probe->height;
  } else {
    // Named by its magic bytes; file content is never echoed.
    return absl::InvalidArgumentError(absl::StrCat(
        "not a supported image format (",
        std::strcmp(format, "unknown format") == 0 ? format : absl::StrCat("looks like ", format),
        ")"));
  }
  trace_ = Trace();
  trace_.format = format;
  trace_.image_width = header_.width;
  trace_.image_height = header_.height;
  return absl::OkStatus();
}

absl::Status SampleTransformer::Run(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                    Rng& rng, uint8_t* out) {
  if (absl::Status s = Start(bytes, spec); !s.ok()) return s;
  if (spec.mode == AugmentMode::kEval) {
    DrawPixelOps(spec, rng);
    return RunEval(spec, out);
  }
  bool fallback = false;
  const CropBox crop = RandomResizedCropBox(header_.width, header_.height, spec, rng, &fallback);
  const bool flip = rng.Bernoulli(spec.flip_probability);
  trace_.fallback = fallback;
  DrawPixelOps(spec, rng);
  return RunTrain(spec, crop, flip, 0, out);
}

void SampleTransformer::DrawPixelOps(const TransformSpec& spec, Rng& rng) {
  // Only drawn when asked for: the presets keep the draws they always made.
  vflip_ = spec.vflip_probability > 0 && rng.Bernoulli(spec.vflip_probability);
  gray_ = spec.grayscale_probability > 0 && rng.Bernoulli(spec.grayscale_probability);
  trace_.ops = spec.image_ops.any() ? DrawImageOps(spec.image_ops, rng) : ImageOpsDraws();
  ops_spec_ = spec.image_ops;
  eval_ = spec.mode == AugmentMode::kEval;
  trace_.vflip = vflip_;
  trace_.grayscale = gray_;
}

absl::Status SampleTransformer::RunCrop(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                        const CropBox& crop, bool flip, int scale_denom,
                                        uint8_t* out) {
  if (absl::Status s = Start(bytes, spec); !s.ok()) return s;
  vflip_ = gray_ = false;
  // The ops draw nothing here: the padding's window centred, nothing else.
  trace_.ops = ImageOpsDraws();
  trace_.ops.pad_top = trace_.ops.pad_left = spec.image_ops.padding;
  ops_spec_ = spec.image_ops;
  eval_ = false;
  if (crop.width <= 0 || crop.height <= 0 || crop.left < 0 || crop.top < 0 ||
      crop.left > header_.width - crop.width || crop.top > header_.height - crop.height) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "crop box top=%d left=%d height=%d width=%d outside the %dx%d image", crop.top, crop.left,
        crop.height, crop.width, header_.width, header_.height));
  }
  if (scale_denom != 0 && scale_denom != 1 && scale_denom != 2 && scale_denom != 4 &&
      scale_denom != 8) {
    return absl::InvalidArgumentError(absl::StrFormat("bad scale denominator %d", scale_denom));
  }
  return RunTrain(spec, crop, flip, scale_denom, out);
}

absl::Status SampleTransformer::RunTrain(const TransformSpec& spec, const CropBox& crop, bool flip,
                                         int scale_denom, uint8_t* out) {
  int d = jpeg_ ? scale_denom : 1;
  if (d == 0) {
    d = spec.dct_scaling
            ? ChooseScaleDenom(crop.width, crop.height, spec.output_width, spec.output_height)
            : 1;
  }
  trace_.crop = crop;
  trace_.flip = flip;
  const double scale_x = static_cast<double>(spec.output_width) / crop.width;
  const double scale_y = static_cast<double>(spec.output_height) / crop.height;
  SetGeometry(spec, scale_x, scale_y, crop.left * scale_x, crop.top * scale_y, flip);
  ResampleAxis x, y;
  int ox = 0, oy = 0;
  TrainAxis(crop.left, crop.width, header_.width, d, spec.output_width, &x, &ox);
  TrainAxis(crop.top, crop.height, header_.height, d, spec.output_height, &y, &oy);
  return Execute(x, ox, y, oy, d, spec, flip, out);
}

absl::Status SampleTransformer::RunMask(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                        const SampleGeometry& g, uint8_t* out) {
  const Trace image_trace = trace_;  // last() keeps describing the image
  const SampleGeometry image_geometry = g;
  absl::Status st = Start(bytes, spec);
  trace_ = image_trace;
  if (!st.ok()) return st;
  if (header_.width != image_geometry.source_width ||
      header_.height != image_geometry.source_height) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the mask is %dx%d, its image %dx%d", header_.width, header_.height,
                        image_geometry.source_width, image_geometry.source_height));
  }
  const int w = image_geometry.output_width, h = image_geometry.output_height;
  auto source = [](int o, double offset, double scale, int limit) {
    const double s = std::floor((o + 0.5 + offset) / scale);
    return static_cast<int>(std::clamp(s, 0.0, static_cast<double>(limit - 1)));
  };
  mask_x_.resize(w);
  mask_y_.resize(h);
  for (int x = 0; x < w; ++x) {
    mask_x_[x] = source(x, image_geometry.offset_x, image_geometry.scale_x, header_.width);
  }
  for (int y = 0; y < h; ++y) {
    mask_y_[y] = source(y, image_geometry.offset_y, image_geometry.scale_y, header_.height);
  }
  const PixelRegion region{mask_x_.front(), mask_y_.front(), mask_x_.back() + 1,
                           mask_y_.back() + 1};
  // With padding the mask is made at the resized image's place first, then
  // gathered through the padding and flips as the image was (fill 0).
  const bool padded = image_geometry.shift_x != 0 || image_geometry.shift_y != 0;
  uint8_t* const target =
      padded ? (mask_resized_.resize(static_cast<size_t>(w) * h), mask_resized_.data()) : out;
  const bool flip = !padded && image_geometry.flip;
  const bool vflip = !padded && image_geometry.vflip;
  int row = region.y0;  // the source row of the next row pushed
  int next = 0;         // the next output row to fill
  auto sink = [&](const uint8_t* rows, size_t stride, int count) {
    for (int r = 0; r < count; ++r, ++row) {
      const uint8_t* rgb = rows + r * stride;
      for (; next < h && mask_y_[next] == row; ++next) {
        const int out_row = vflip ? h - 1 - next : next;
        uint8_t* dst = target + static_cast<size_t>(out_row) * w;
        for (int x = 0; x < w; ++x) {
          dst[flip ? w - 1 - x : x] = rgb[3 * (mask_x_[x] - region.x0)];
        }
      }
    }
  };
  st = jpeg_ ? decoder_.DecodeRegion(region, 1, sink) : ffmpeg_->DecodeRegion(region, sink);
  if (!st.ok()) return st;
  if (next != h) return absl::DataLossError("the mask's decoder stopped before its last row");
  if (padded) GatherPadded(image_geometry, mask_resized_.data(), out);
  return absl::OkStatus();
}

void SampleTransformer::GatherPadded(const SampleGeometry& g, const uint8_t* mask, uint8_t* out) {
  const int w = g.output_width, h = g.output_height;
  for (int y = 0; y < h; ++y) {
    const int sy = PaddedIndex(y - g.shift_y, h, g.pad_mode);
    uint8_t* dst = out + static_cast<size_t>(g.vflip ? h - 1 - y : y) * w;
    for (int x = 0; x < w; ++x) {
      const int sx = PaddedIndex(x - g.shift_x, w, g.pad_mode);
      dst[g.flip ? w - 1 - x : x] = sx < 0 || sy < 0 ? 0 : mask[static_cast<size_t>(sy) * w + sx];
    }
  }
}

bool SampleTransformer::LastDraws(std::string* out) const {
  const Trace& t = trace_;
  const std::string where =
      eval_ ? absl::StrFormat("\"window\":[%d,%d,%d,%d]", t.window.resized_height,
                              t.window.resized_width, t.window.top, t.window.left)
            : absl::StrFormat("\"crop\":[%d,%d,%d,%d],\"flip\":%s", t.crop.top, t.crop.left,
                              t.crop.height, t.crop.width, t.flip ? "true" : "false");
  std::string ops = ImageOpsDrawsJson(ops_spec_, trace_.ops);  // "{...}"
  *out = absl::StrCat("{", where, ",\"vflip\":", t.vflip ? "true" : "false",
                      ",\"grayscale\":", t.grayscale ? "true" : "false", ops.size() > 2 ? "," : "",
                      ops.substr(1));
  return true;
}

void SampleTransformer::SetGeometry(const TransformSpec& spec, double scale_x, double scale_y,
                                    double offset_x, double offset_y, bool flip) {
  geometry_ = SampleGeometry{.source_width = header_.width,
                             .source_height = header_.height,
                             .output_width = spec.output_width,
                             .output_height = spec.output_height,
                             .scale_x = scale_x,
                             .scale_y = scale_y,
                             .offset_x = offset_x,
                             .offset_y = offset_y,
                             .shift_x = spec.image_ops.padding - trace_.ops.pad_left,
                             .shift_y = spec.image_ops.padding - trace_.ops.pad_top,
                             .pad_mode = spec.image_ops.padding_mode,
                             .flip = flip,
                             .vflip = vflip_};
}

absl::Status SampleTransformer::RunEval(const TransformSpec& spec, uint8_t* out) {
  const EvalWindow win = EvalCenterWindow(header_.width, header_.height, spec);
  trace_.window = win;
  SetGeometry(spec, static_cast<double>(win.resized_width) / header_.width,
              static_cast<double>(win.resized_height) / header_.height, win.left, win.top, false);
  // Per-axis filter scale of the resize; decode at 1/d only while it stays >= 1.
  const double sx = static_cast<double>(header_.width) / win.resized_width;
  const double sy = static_cast<double>(header_.height) / win.resized_height;
  const int d = spec.dct_scaling && jpeg_ ? ChooseScaleDenom(sx, sy, 1, 1) : 1;
  ResampleAxis x, y;
  EvalAxis(header_.width, d, win.resized_width, win.left, spec.output_width, &x);
  EvalAxis(header_.height, d, win.resized_height, win.top, spec.output_height, &y);
  return Execute(x, 0, y, 0, d, spec, false, out);
}

absl::Status SampleTransformer::Execute(const ResampleAxis& x, int x_origin, const ResampleAxis& y,
                                        int y_origin, int scale_denom, const TransformSpec& spec,
                                        bool flip, uint8_t* out) {
  if (absl::Status s = resampler_.Plan(x, y); !s.ok()) return s;
  PixelRegion region;
  region.x0 = x_origin + resampler_.src_x_begin();
  region.x1 = x_origin + resampler_.src_x_end();
  region.y0 = y_origin + resampler_.src_y_begin();
  region.y1 = y_origin + resampler_.src_y_end();
  trace_.scale_denom = scale_denom;
  trace_.decoded = region;
  auto push = [this](const uint8_t* rows, size_t stride, int count) {
    resampler_.PushRows(rows, stride, count);
  };
  absl::Status s;
  if (jpeg_ && relaid_.has_value() && relaid_->interval_mcus == 1) {
    // A copy with a marker after every MCU (what RelayJpeg writes): the
    // region's MCUs are decoded straight from their intervals.
    const McuIntervals intervals{relaid_->starts, relaid_->ends};
    s = decoder_.DecodeRegion(region, scale_denom, push, &intervals);
    trace_.from_intervals = decoder_.mcus_decoded_from_intervals() > 0;
  } else if (jpeg_ && relaid_.has_value()) {
    // Intervals of several MCUs: the smaller JPEG of those the region covers.
    int ox = 0, oy = 0;
    const McuRect rect = RectForRegion(*relaid_, region, scale_denom, &ox, &oy);
    const bool smaller =
        rect.col1 - rect.col0 < relaid_->mcus_per_row || rect.row1 - rect.row0 < relaid_->mcu_rows;
    if (smaller && ExtractMcuRect(bytes_, *relaid_, rect, &sub_jpeg_).ok() &&
        decoder_.ReadHeader(sub_jpeg_, limits_).ok()) {
      trace_.from_intervals = true;
      const PixelRegion shifted{region.x0 - ox, region.y0 - oy, region.x1 - ox, region.y1 - oy};
      s = decoder_.DecodeRegion(shifted, scale_denom, push);
    } else {
      // (The original's header was read again only if the smaller one's failed.)
      if (smaller) {
        absl::StatusOr<JpegHeader> again = decoder_.ReadHeader(bytes_, limits_);
        if (!again.ok()) return again.status();
      }
      s = decoder_.DecodeRegion(region, scale_denom, push);
    }
  } else {
    s = jpeg_ ? decoder_.DecodeRegion(region, scale_denom, push)
              : ffmpeg_->DecodeRegion(region, push);
  }
  if (!s.ok()) return s;

  if (spec.image_ops.any()) {
    FinishWholeImage(spec, flip, out);
    return absl::OkStatus();
  }
  WriteOutput(spec, flip, vflip_, gray_, out);
  return absl::OkStatus();
}

template <typename RowSource>
void SampleTransformer::WriteRows(const TransformSpec& spec, bool flip, bool vflip, bool gray,
                                  uint8_t* out, RowSource&& rows) {
  const int w = spec.output_width;
  const int h = spec.output_height;
  const bool planar = spec.layout == Layout::kNCHW;
  // The vertical flip and grayscale, after the resize: the output row a
  // resized row goes to, and its pixels (PIL's convert("L") as three equal
  // channels: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16).
  if (gray) gray_row_.resize(static_cast<size_t>(w) * 3);
  auto row_of = [&](int yy) { return vflip ? h - 1 - yy : yy; };
  auto pixels_of = [&](const uint8_t* rgb) -> const uint8_t* {
    if (!gray) return rgb;
    uint8_t* g = gray_row_.data();
    for (int x = 0; x < w; ++x) {
      const uint32_t l =
          (rgb[3 * x] * 19595u + rgb[3 * x + 1] * 38470u + rgb[3 * x + 2] * 7471u + 0x8000u) >> 16;
      g[3 * x] = g[3 * x + 1] = g[3 * x + 2] = static_cast<uint8_t>(l);
    }
    return g;
  };
  switch (spec.dtype) {
    case DType::kUint8:
      if (!planar && !flip) {
        const size_t row = static_cast<size_t>(w) * 3;
        rows([&](int yy, const uint8_t* rgb) {
          std::memcpy(out + row_of(yy) * row, pixels_of(rgb), row);
        });
      } else if (planar && resampler_.simd()) {
        const size_t plane = static_cast<size_t>(w) * h;
        rows([&](int yy, const uint8_t* rgb) {
          uint8_t* r = out + static_cast<size_t>(row_of(yy)) * w;
          DeinterleaveRowSimd(pixels_of(rgb), w, flip, r, r + plane, r + 2 * plane);
        });
      } else {
        rows([&](int yy, const uint8_t* rgb) {
          WriteRow(pixels_of(rgb), w, row_of(yy), h, planar, flip, out,
                   [](int, uint8_t v) { return v; });
        });
      }
      break;
    case DType::kFloat32: {
      PrepareTables(spec);
      float* o = reinterpret_cast<float*>(out);
      rows([&](int yy, const uint8_t* rgb) {
        WriteRow(pixels_of(rgb), w, row_of(yy), h, planar, flip, o,
                 [this](int c, uint8_t v) { return f32_table_[c][v]; });
      });
      break;
    }
    case DType::kFloat16: {
      PrepareTables(spec);
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      rows([&](int yy, const uint8_t* rgb) {
        WriteRow(pixels_of(rgb), w, row_of(yy), h, planar, flip, o,
                 [this](int c, uint8_t v) { return f16_table_[c][v]; });
      });
      break;
    }
  }
}

void SampleTransformer::WriteOutput(const TransformSpec& spec, bool flip, bool vflip, bool gray,
                                    uint8_t* out) {
  WriteRows(spec, flip, vflip, gray, out, [this](auto&& sink) { resampler_.Finish(sink); });
}

void SampleTransformer::FinishWholeImage(const TransformSpec& spec, bool flip, uint8_t* out) {
  const int w = spec.output_width;
  const int h = spec.output_height;
  const size_t stride = static_cast<size_t>(w) * 3;
  image_.resize(stride * h);
  // image_ pixel (x, y) shows resized pixel (gather_x_[x], gather_y_[y]):
  // the padding's window, then the flips; −1 is the fill.
  const ImageOpsSpec& o = spec.image_ops;
  const int shift_x = o.padding - trace_.ops.pad_left, shift_y = o.padding - trace_.ops.pad_top;
  gather_x_.resize(w);
  gather_y_.resize(h);
  for (int x = 0; x < w; ++x) {
    gather_x_[flip ? w - 1 - x : x] = PaddedIndex(x - shift_x, w, o.padding_mode);
  }
  for (int y = 0; y < h; ++y) {
    gather_y_[vflip_ ? h - 1 - y : y] = PaddedIndex(y - shift_y, h, o.padding_mode);
  }
  const uint8_t fill = static_cast<uint8_t>(o.fill);
  auto gather_row = [&](const uint8_t* src, uint8_t* dst) {
    for (int x = 0; x < w; ++x) {
      const int sx = gather_x_[x];
      if (sx < 0) {
        dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = fill;
      } else {
        std::memcpy(dst + 3 * x, src + 3 * sx, 3);
      }
    }
  };
  if (o.padding_mode == PadMode::kConstant) {
    // Each resized row shows in at most one row of image_: gathered as the
    // resampler finishes it, with no copy of the whole resized image.
    if (shift_y != 0) std::memset(image_.data(), fill, image_.size());
    resampler_.Finish([&](int yy, const uint8_t* rgb) {
      const int y = yy + shift_y;
      if (y < 0 || y >= h) return;
      uint8_t* dst = image_.data() + static_cast<size_t>(vflip_ ? h - 1 - y : y) * stride;
      if (shift_x == 0 && !flip) {
        std::memcpy(dst, rgb, stride);
      } else {
        gather_row(rgb, dst);
      }
    });
  } else {
    // Edge and reflect padding repeat resized rows: keep them all first.
    resized_.resize(stride * h);
    resampler_.Finish([&](int yy, const uint8_t* rgb) {
      std::memcpy(resized_.data() + yy * stride, rgb, stride);
    });
    for (int y = 0; y < h; ++y) {
      gather_row(resized_.data() + static_cast<size_t>(gather_y_[y]) * stride,
                 image_.data() + y * stride);
    }
  }
  ApplyImageOps(spec, RgbView{image_.data(), w, h});
  // Flips and grayscale are in image_ already.
  WriteRows(spec, false, false, false, out, [&](auto&& sink) {
    for (int y = 0; y < h; ++y) sink(y, image_.data() + y * stride);
  });
}

void SampleTransformer::ApplyImageOps(const TransformSpec& spec, RgbView image) {
  const ImageOpsDraws& d = trace_.ops;  // what this image drew
  if (d.jitter) {
    for (int fn : d.jitter_order) {
      switch (fn) {
        case 0:
          if (d.brightness != 1) AdjustBrightness(image, d.brightness);
          break;
        case 1:
          if (d.contrast != 1) AdjustContrast(image, d.contrast);
          break;
        case 2:
          if (d.saturation != 1) AdjustSaturation(image, d.saturation);
          break;
        case 3:
          if (d.hue != 0) AdjustHue(image, d.hue);
          break;
      }
    }
  }
  if (gray_) ToGrayscale(image);
  if (d.blur) {
    const ImageOpsSpec& o = spec.image_ops;
    GaussianBlur(image, o.blur_kernel_width, o.blur_kernel_height, d.blur_sigma, d.blur_sigma,
                 &blur_scratch_);
  }
  if (d.trivial_augment) ApplyTrivialAugment(d.trivial, image, &op_scratch_);
}

void SampleTransformer::PrepareTables(const TransformSpec& spec) {
  if (tables_valid_ && table_mean_ == spec.mean && table_std_ == spec.std) return;
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      // torchvision: ToTensor divides by 255 in float32, Normalize subtracts
      // and divides in float32; the same three roundings here.
      const float scaled = static_cast<float>(v) / 255.0f;
      const float value = (scaled - spec.mean[c]) / spec.std[c];
      f32_table_[c][v] = value;
      f16_table_[c][v] = FloatToHalf(value);
    }
  }
  table_mean_ = spec.mean;
  table_std_ = spec.std;
  tables_valid_ = true;
}

}  // namespace conveyor
