#include "core/decode/resize.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"

namespace conveyor {

namespace {

// Pillow: PRECISION_BITS = 32 - 8 - 2.
constexpr int kPrecisionBits = 22;
constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
constexpr int32_t kOne = 1 << kPrecisionBits;

// Horizontal AVX2 weights are split into 16-bit halves so that vpmaddwd
// (16x16 -> 32-bit multiply-add of pairs) computes the exact int32 products:
//   w = hi * 2^15 + lo, 0 <= lo < 2^15, 0 <= hi <= 2^7 (w <= 2^22; bilinear
//   weights are never negative), p * w = p * lo + (p * hi) << 15.
// All sums are exact modulo 2^32 and the true total is < 2^31, so the int32
// result equals Pillow's.
constexpr int kLoBits = 15;

inline double BilinearFilter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

inline uint8_t Clip8(int32_t v) {
  v >>= kPrecisionBits;
  return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
}

bool CpuHasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

size_t RoundUp(size_t v, size_t m) { return (v + m - 1) / m * m; }

// ---------------------------------------------------------------- portable

void HorizontalRowScalar(const uint8_t* src, uint8_t* dst, const AxisFilter& f,
                         const int32_t* start) {
  const int ksize = f.ksize;
  for (int xx = 0; xx < f.out_size; ++xx) {
    const uint8_t* p = src + 3 * start[xx];
    const int32_t* k = f.coeffs.data() + static_cast<size_t>(xx) * ksize;
    int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
    for (int x = 0; x < f.count[xx]; ++x, p += 3) {
      s0 += p[0] * k[x];
      s1 += p[1] * k[x];
      s2 += p[2] * k[x];
    }
    dst[3 * xx + 0] = Clip8(s0);
    dst[3 * xx + 1] = Clip8(s1);
    dst[3 * xx + 2] = Clip8(s2);
  }
}

void VerticalRowScalar(const uint8_t* tmp, size_t tmp_stride, int first, int count,
                       const int32_t* k, int n, int32_t* acc, uint8_t* dst) {
  for (int x = 0; x < n; ++x) acc[x] = kHalf;
  const uint8_t* row = tmp + static_cast<size_t>(first) * tmp_stride;
  for (int y = 0; y < count; ++y, row += tmp_stride) {
    const int32_t w = k[y];
    for (int x = 0; x < n; ++x) acc[x] += row[x] * w;
  }
  for (int x = 0; x < n; ++x) dst[x] = Clip8(acc[x]);
}

// ---------------------------------------------------------------- AVX2

// 4 taps per step: a 16-byte load holds taps t..t+3 (12 bytes), broadcast to
// both 128-bit lanes; the shuffle puts taps (t, t+1) as int16 pairs
// (R R, G G, B B, 0 0) in the low lane and (t+2, t+3) in the high lane, and
// vpmaddwd with the matching weight pairs gives per-channel partial sums.
struct HorizontalSums {
  __m256i lo, hi;
};

// kGroups > 0: every pixel runs exactly kGroups groups (unrolled; groups past
// a pixel's own taps have zero weights). kGroups == 0: per-pixel count.
template <int kGroups>
__attribute__((target("avx2"), always_inline)) inline HorizontalSums HorizontalTaps(
    const uint8_t* p, const int16_t* w, int groups, __m256i shuffle) {
  __m256i lo = _mm256_setzero_si256();
  __m256i hi = _mm256_setzero_si256();
  const int n = kGroups > 0 ? kGroups : groups;
#pragma GCC unroll 4
  for (int g = 0; g < n; ++g, p += 12, w += 32) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i px = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(raw), shuffle);
    lo = _mm256_add_epi32(
        lo, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))));
    hi = _mm256_add_epi32(
        hi, _mm256_madd_epi16(px, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))));
  }
  return {lo, hi};
}

// Two output pixels per iteration share the final reduction: their sums are
// folded into one register (pixel A low lane, B high lane) before the
// shift, round and pack. Stores 4 bytes per pixel (the 4th is overwritten by
// the next pixel or lands in the row padding).
template <int kGroups>
__attribute__((target("avx2"), always_inline)) inline void HorizontalRowAvx2Impl(
    const uint8_t* src, uint8_t* dst, int out_size, const int32_t* start, const int32_t* groups,
    const int16_t* vec, int max_groups) {
  const __m256i shuffle =
      _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 6, -1, 9, -1, 7,
                       -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m256i half = _mm256_set1_epi32(kHalf);
  const size_t vstride = static_cast<size_t>(max_groups) * 32;
  int xx = 0;
  for (; xx + 2 <= out_size; xx += 2) {
    const HorizontalSums a =
        HorizontalTaps<kGroups>(src + start[xx], vec + xx * vstride, groups[xx], shuffle);
    const HorizontalSums b = HorizontalTaps<kGroups>(src + start[xx + 1], vec + (xx + 1) * vstride,
                                                     groups[xx + 1], shuffle);
    // Per pixel lo + (hi << 15), then fold: [A.lane0 + A.lane1 | B.lane0 + B.lane1].
    const __m256i sa = _mm256_add_epi32(a.lo, _mm256_slli_epi32(a.hi, kLoBits));
    const __m256i sb = _mm256_add_epi32(b.lo, _mm256_slli_epi32(b.hi, kLoBits));
    __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(sa, sb, 0x20),
                                   _mm256_permute2x128_si256(sa, sb, 0x31));
    sum = _mm256_srai_epi32(_mm256_add_epi32(sum, half), kPrecisionBits);
    const __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(sum, sum), sum);
    const int32_t va = _mm256_cvtsi256_si32(packed);
    const int32_t vb = _mm_cvtsi128_si32(_mm256_extracti128_si256(packed, 1));
    std::memcpy(dst + 3 * xx, &va, 4);
    std::memcpy(dst + 3 * xx + 3, &vb, 4);
  }
  if (xx < out_size) {
    const HorizontalSums a =
        HorizontalTaps<kGroups>(src + start[xx], vec + xx * vstride, groups[xx], shuffle);
    const __m128i lo =
        _mm_add_epi32(_mm256_castsi256_si128(a.lo), _mm256_extracti128_si256(a.lo, 1));
    const __m128i hi =
        _mm_add_epi32(_mm256_castsi256_si128(a.hi), _mm256_extracti128_si256(a.hi, 1));
    __m128i sum =
        _mm_add_epi32(_mm_add_epi32(lo, _mm_slli_epi32(hi, kLoBits)), _mm_set1_epi32(kHalf));
    sum = _mm_srai_epi32(sum, kPrecisionBits);
    const __m128i packed = _mm_packus_epi16(_mm_packs_epi32(sum, sum), sum);
    const int32_t v = _mm_cvtsi128_si32(packed);
    std::memcpy(dst + 3 * xx, &v, 4);
  }
}

// Up to kMaxUniformGroups groups all pixels run the same unrolled count; the
// extra taps read at most 4 * kMaxUniformGroups - 1 pixels past a pixel's
// last tap (inside kReadPadding, see BuildHorizontalTables).
[[maybe_unused]] constexpr int kMaxUniformGroups = 2;  // documents the bound below

// `start` holds each pixel's first tap as a byte offset (3 * pixel).
__attribute__((target("avx2"))) void HorizontalRowAvx2(const uint8_t* src, uint8_t* dst,
                                                       int out_size, const int32_t* start,
                                                       const int32_t* groups, const int16_t* vec,
                                                       int max_groups) {
  switch (max_groups) {
    case 1: HorizontalRowAvx2Impl<1>(src, dst, out_size, start, groups, vec, max_groups); break;
    case 2: HorizontalRowAvx2Impl<2>(src, dst, out_size, start, groups, vec, max_groups); break;
    default: HorizontalRowAvx2Impl<0>(src, dst, out_size, start, groups, vec, max_groups); break;
  }
}

// 32 output bytes per step, int32 lanes: acc += row * w with vpmulld; rows of
// tmp are padded to a multiple of 32 bytes, so the tail needs no special case.
__attribute__((target("avx2"))) void VerticalRowAvx2(const uint8_t* tmp, size_t tmp_stride,
                                                     int first, int count, const int32_t* k, int n,
                                                     uint8_t* dst) {
  const __m256i half = _mm256_set1_epi32(kHalf);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const uint8_t* base = tmp + static_cast<size_t>(first) * tmp_stride;
  for (int x = 0; x < n; x += 32) {
    __m256i a0 = half, a1 = half, a2 = half, a3 = half;
    const uint8_t* p = base + x;
    for (int y = 0; y < count; ++y, p += tmp_stride) {
      const __m256i w = _mm256_set1_epi32(k[y]);
      const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
      const __m256i v1 =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8)));
      const __m256i v2 =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 16)));
      const __m256i v3 =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 24)));
      a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(v0, w));
      a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(v1, w));
      a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(v2, w));
      a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(v3, w));
    }
    a0 = _mm256_srai_epi32(a0, kPrecisionBits);
    a1 = _mm256_srai_epi32(a1, kPrecisionBits);
    a2 = _mm256_srai_epi32(a2, kPrecisionBits);
    a3 = _mm256_srai_epi32(a3, kPrecisionBits);
    // packs/packus work per 128-bit lane; the permute restores byte order.
    const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + x), _mm256_permutevar8x32_epi32(b, order));
  }
}

}  // namespace

absl::Status ValidateResampleAxis(const ResampleAxis& a) {
  if (a.in_size <= 0 || a.resized_size <= 0 || a.out_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resample axis: sizes must be positive (in %d, resized %d, out %d)",
                        a.in_size, a.resized_size, a.out_size));
  }
  if (!(a.box0 >= 0) || !(a.box1 <= a.in_size) || !(a.box0 < a.box1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "resample axis: box [%g, %g) not a non-empty part of [0, %d)", a.box0, a.box1, a.in_size));
  }
  if (a.out_offset < 0 || a.out_offset > a.resized_size - a.out_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resample axis: window [%d, %d) outside the %d-pixel resize", a.out_offset,
                        a.out_offset + a.out_size, a.resized_size));
  }
  return absl::OkStatus();
}

void ComputeAxisFilter(const ResampleAxis& axis, AxisFilter* f) {
  // Pillow's precompute_coeffs, statement for statement (same double
  // arithmetic in the same order), for outputs out_offset..out_offset+out_size.
  const double scale = (axis.box1 - axis.box0) / axis.resized_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  f->out_size = axis.out_size;
  f->ksize = ksize;
  f->first.resize(axis.out_size);
  f->count.resize(axis.out_size);
  f->coeffs.assign(static_cast<size_t>(axis.out_size) * ksize, 0);
  f->src_begin = axis.in_size;
  f->src_end = 0;
  double weights[1024];
  std::vector<double> big;
  double* k = weights;
  if (ksize > 1024) {
    big.resize(ksize);
    k = big.data();
  }
  for (int i = 0; i < axis.out_size; ++i) {
    const int xx = axis.out_offset + i;
    const double center = axis.box0 + (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > axis.in_size) xmax = axis.in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = BilinearFilter((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    int32_t* q = f->coeffs.data() + static_cast<size_t>(i) * ksize;
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
      // normalize_coeffs_8bpc
      q[x] = k[x] < 0 ? static_cast<int32_t>(-0.5 + k[x] * kOne)
                      : static_cast<int32_t>(0.5 + k[x] * kOne);
    }
    // Drop trailing zero weights from the tap range (they add nothing), so
    // the union of ranges and the rows decoded are as small as possible.
    int n = xmax;
    while (n > 1 && q[n - 1] == 0) --n;
    int lead = 0;
    while (lead < n - 1 && q[lead] == 0) ++lead;
    if (lead > 0) {
      std::memmove(q, q + lead, sizeof(int32_t) * (n - lead));
      std::fill(q + (n - lead), q + n, 0);
    }
    f->first[i] = xmin + lead;
    f->count[i] = n - lead;
    f->src_begin = std::min(f->src_begin, f->first[i]);
    f->src_end = std::max(f->src_end, f->first[i] + f->count[i]);
  }
  f->identity = true;
  f->src_index.resize(axis.out_size);
  for (int i = 0; i < axis.out_size && f->identity; ++i) {
    const int32_t* q = f->coeffs.data() + static_cast<size_t>(i) * ksize;
    // Consecutive source pixels with weight 1.0 (only happens at scale 1 with
    // an integer box start).
    if (f->count[i] == 1 && q[0] == kOne && (i == 0 || f->first[i] == f->src_index[0] + i)) {
      f->src_index[i] = f->first[i];
    } else {
      f->identity = false;
    }
  }
}

Resampler::Resampler(bool allow_simd) : simd_(allow_simd && CpuHasAvx2()) {}

absl::Status Resampler::Plan(const ResampleAxis& x, const ResampleAxis& y) {
  if (absl::Status s = ValidateResampleAxis(x); !s.ok()) return s;
  if (absl::Status s = ValidateResampleAxis(y); !s.ok()) return s;
  ComputeAxisFilter(x, &hfilter_);
  ComputeAxisFilter(y, &vfilter_);
  BuildHorizontalTables();
  const size_t row_bytes = static_cast<size_t>(hfilter_.out_size) * 3;
  tmp_stride_ = RoundUp(row_bytes + 4, 32);
  const size_t tmp_bytes = tmp_stride_ * (vfilter_.src_end - vfilter_.src_begin);
  // Grown buffers are zeroed: the row padding is read by 32-byte loads.
  if (tmp_.size() < tmp_bytes) tmp_.resize(tmp_bytes, 0);
  if (row_.size() < tmp_stride_) row_.resize(tmp_stride_, 0);
  if (acc_.size() < row_bytes) acc_.resize(row_bytes);
  rows_pushed_ = 0;
  return absl::OkStatus();
}

void Resampler::BuildHorizontalTables() {
  const AxisFilter& f = hfilter_;
  hstart_.resize(f.out_size);
  hgroups_.resize(f.out_size);
  int max_count = 1;
  for (int i = 0; i < f.out_size; ++i) {
    hstart_[i] = f.first[i] - f.src_begin;
    max_count = std::max(max_count, f.count[i]);
  }
  if (!simd_) return;
  hbyte_.resize(f.out_size);
  for (int i = 0; i < f.out_size; ++i) hbyte_[i] = 3 * hstart_[i];
  hmax_groups_ = (max_count + 3) / 4;
  hvec_.assign(static_cast<size_t>(f.out_size) * hmax_groups_ * 32, 0);
  for (int i = 0; i < f.out_size; ++i) {
    const int32_t* q = f.coeffs.data() + static_cast<size_t>(i) * f.ksize;
    const int groups = (f.count[i] + 3) / 4;
    hgroups_[i] = groups;
    int16_t* v = hvec_.data() + static_cast<size_t>(i) * hmax_groups_ * 32;
    for (int g = 0; g < groups; ++g, v += 32) {
      for (int half = 0; half < 2; ++half) {  // 128-bit lane: taps 4g+2*half, +1
        for (int t = 0; t < 2; ++t) {
          const int tap = 4 * g + 2 * half + t;
          const int32_t w = tap < f.count[i] ? q[tap] : 0;
          const int16_t lo = static_cast<int16_t>(w & ((1 << kLoBits) - 1));
          const int16_t hi = static_cast<int16_t>(w >> kLoBits);
          for (int c = 0; c < 3; ++c) {
            v[half * 8 + 2 * c + t] = lo;
            v[16 + half * 8 + 2 * c + t] = hi;
          }
        }
      }
    }
  }
}

void Resampler::PushRows(const uint8_t* rows, size_t stride, int count) {
  const int total = vfilter_.src_end - vfilter_.src_begin;
  count = std::min(count, total - rows_pushed_);
  const size_t row_bytes = static_cast<size_t>(hfilter_.out_size) * 3;
  for (int r = 0; r < count; ++r, rows += stride) {
    uint8_t* dst = tmp_.data() + static_cast<size_t>(rows_pushed_ + r) * tmp_stride_;
    if (hfilter_.identity) {
      // An identity filter maps outputs to consecutive source pixels.
      std::memcpy(dst, rows + 3 * static_cast<size_t>(hfilter_.src_index[0] - hfilter_.src_begin),
                  row_bytes);
    } else if (simd_) {
      HorizontalRowAvx2(rows, dst, hfilter_.out_size, hbyte_.data(), hgroups_.data(), hvec_.data(),
                        hmax_groups_);
    } else {
      HorizontalRowScalar(rows, dst, hfilter_, hstart_.data());
    }
  }
  rows_pushed_ += count;
}

void Resampler::Finish(RowEmitter emit) {
  const int n = hfilter_.out_size * 3;
  const AxisFilter& f = vfilter_;
  for (int y = 0; y < f.out_size; ++y) {
    if (f.identity) {
      emit(y, tmp_.data() + static_cast<size_t>(f.src_index[y] - f.src_begin) * tmp_stride_);
      continue;
    }
    const int32_t* k = f.coeffs.data() + static_cast<size_t>(y) * f.ksize;
    const int first = f.first[y] - f.src_begin;
    if (simd_) {
      VerticalRowAvx2(tmp_.data(), tmp_stride_, first, f.count[y], k, n, row_.data());
    } else {
      VerticalRowScalar(tmp_.data(), tmp_stride_, first, f.count[y], k, n, acc_.data(),
                        row_.data());
    }
    emit(y, row_.data());
  }
}

absl::Status ResizeRgb(const uint8_t* src, int width, int height, size_t stride,
                       const ResampleAxis& x, const ResampleAxis& y, uint8_t* out,
                       bool allow_simd) {
  if (x.in_size != width || y.in_size != height) {
    return absl::InvalidArgumentError("ResizeRgb: axis in_size differs from the image size");
  }
  Resampler resampler(allow_simd);
  if (absl::Status s = resampler.Plan(x, y); !s.ok()) return s;
  // Copy the rows the plan reads into a buffer with the read padding.
  const int x0 = resampler.src_x_begin(), y0 = resampler.src_y_begin();
  const size_t row_bytes = static_cast<size_t>(resampler.src_x_end() - x0) * 3;
  const int rows = resampler.src_y_end() - y0;
  std::vector<uint8_t> buf(row_bytes * rows + Resampler::kReadPadding, 0);
  for (int r = 0; r < rows; ++r) {
    std::memcpy(buf.data() + r * row_bytes, src + (y0 + r) * stride + x0 * 3, row_bytes);
  }
  resampler.PushRows(buf.data(), row_bytes, rows);
  const size_t out_row = static_cast<size_t>(x.out_size) * 3;
  resampler.Finish(
      [&](int yy, const uint8_t* rgb) { std::memcpy(out + yy * out_row, rgb, out_row); });
  return absl::OkStatus();
}

}  // namespace conveyor
