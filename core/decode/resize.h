// Antialiased bilinear resampling of 8-bit RGB that reproduces Pillow's
// ImagingResample (Image.resize(size, Image.BILINEAR, box)) bit for bit:
// triangle filter with support max(scale, 1), per-output taps and weights
// computed in double exactly as Pillow's precompute_coeffs, weights rounded to
// Q22 fixed point (PRECISION_BITS = 22), a horizontal pass first over only the
// source rows the vertical pass needs, its result rounded and clipped to uint8,
// then the vertical pass. (Pillow skips a pass whose axis is an identity; ours
// then computes the same copy.)
//
// The horizontal pass runs as source rows arrive (PushRows), so a decoder can
// feed rows straight from its batch buffer while they are in cache; the
// vertical pass runs in Finish and hands out finished RGB rows, so the caller
// can write them in any layout or type without another full-image copy.
// Inner loops use AVX2 when the CPU has it (chosen at run time; the library is
// built for baseline x86-64) and portable C++ otherwise; both give identical
// bytes.
//
// Thread-safety: a Resampler is not thread-safe; use one per thread. Plan
// reuses its buffers, so once warmed up no call allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace conveyor {

// One axis of a resample, in the coordinates of the source image the
// resampler sees (`in_size` pixels): the source interval [box0, box1) is
// stretched onto `resized_size` output pixels, of which the window
// [out_offset, out_offset + out_size) is produced. Pillow's
// Image.resize(size, box=...) is out_offset = 0, out_size = resized_size.
// The filter never reads outside [0, in_size): a crop is resized "as its own
// image" (PIL's img.crop(box).resize(...)) by making in_size the crop size.
struct ResampleAxis {
  int in_size = 0;
  double box0 = 0;
  double box1 = 0;
  int resized_size = 0;
  int out_offset = 0;
  int out_size = 0;
};

// REQUIRES nothing; returns InvalidArgument if the axis is malformed
// (empty sizes, box outside [0, in_size], window outside the resize).
absl::Status ValidateResampleAxis(const ResampleAxis& axis);

// The fixed-point filter of one axis.
struct AxisFilter {
  int out_size = 0;
  int ksize = 0;                // coefficient slots per output (Pillow's ksize)
  std::vector<int> first;       // per output: first source index read
  std::vector<int> count;       // per output: number of taps
  std::vector<int32_t> coeffs;  // out_size * ksize weights in Q22
  int src_begin = 0;            // union of all taps: [src_begin, src_end)
  int src_end = 0;
  // Every output copies exactly one source pixel (weight 1.0): src_index.
  bool identity = false;
  std::vector<int> src_index;
};

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter.
// REQUIRES: ValidateResampleAxis(axis).ok().
void ComputeAxisFilter(const ResampleAxis& axis, AxisFilter* filter);

class Resampler {
 public:
  // Readable bytes PushRows may touch past the right edge (column src_x_end())
  // of the last row it is given. Rows other than the last may be read up to
  // the same distance past their right edge too, inside the caller's buffer.
  static constexpr size_t kReadPadding = 32;

  // allow_simd = false forces the portable kernels (tests compare the two).
  explicit Resampler(bool allow_simd = true);

  // Prepares the filters for a resample of a source image of x.in_size by
  // y.in_size pixels to an x.out_size by y.out_size output. Discards any
  // resample in progress.
  absl::Status Plan(const ResampleAxis& x, const ResampleAxis& y);

  // The source rectangle the plan reads: columns [src_x_begin, src_x_end),
  // rows [src_y_begin, src_y_end). Nothing outside it is needed.
  int src_x_begin() const { return hfilter_.src_begin; }
  int src_x_end() const { return hfilter_.src_end; }
  int src_y_begin() const { return vfilter_.src_begin; }
  int src_y_end() const { return vfilter_.src_end; }
  int out_width() const { return hfilter_.out_size; }
  int out_height() const { return vfilter_.out_size; }

  // Horizontal pass over the next `count` source rows, in order from
  // src_y_begin(). `rows` points at column src_x_begin() of the first one;
  // rows are `stride` bytes apart, packed RGB.
  // REQUIRES: a successful Plan; no more than src_y_end() - src_y_begin() rows
  // in all; kReadPadding readable bytes after each row's column src_x_end().
  void PushRows(const uint8_t* rows, size_t stride, int count);

  // Vertical pass: calls emit(y, rgb) for y = 0 .. out_height()-1 in order
  // with the packed RGB row (out_width()*3 bytes, valid during the call).
  // REQUIRES: all src_y_end() - src_y_begin() rows were pushed.
  using RowEmitter = absl::FunctionRef<void(int y, const uint8_t* rgb)>;
  void Finish(RowEmitter emit);

  bool simd() const { return simd_; }

 private:
  void BuildHorizontalTables();

  bool simd_;
  AxisFilter hfilter_;
  AxisFilter vfilter_;
  // Horizontal taps relative to src_x_begin, and (AVX2) the weights laid out
  // as 4-tap groups of 16-bit halves, 32 int16 per group (see resize.cc).
  std::vector<int32_t> hstart_;
  std::vector<int32_t> hbyte_;  // 3 * hstart_
  std::vector<int32_t> hgroups_;
  std::vector<int16_t> hvec_;
  int hmax_groups_ = 0;
  // Horizontal results: one row of out_width()*3 bytes per source row
  // [src_y_begin, src_y_end), tmp_stride_ apart (padded for 32-byte loads).
  std::vector<uint8_t> tmp_;
  size_t tmp_stride_ = 0;
  int rows_pushed_ = 0;
  std::vector<uint8_t> row_;  // one vertical-pass output row (padded)
  std::vector<int32_t> acc_;  // scalar vertical accumulators
};

// Convenience for tests and tools: resamples a packed RGB image
// (`width` x `height`, `stride` bytes per row) to out (x.out_size * y.out_size
// * 3 bytes, packed RGB). REQUIRES: x.in_size == width, y.in_size == height.
absl::Status ResizeRgb(const uint8_t* src, int width, int height, size_t stride,
                       const ResampleAxis& x, const ResampleAxis& y, uint8_t* out,
                       bool allow_simd = true);

}  // namespace conveyor
