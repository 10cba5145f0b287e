// SampleGeometry: where a decoded sample's pixels came from in its source
// image — the scale and offset of the crop/resize and the flip — so that
// annotations drawn on the source (detection boxes) can be moved with the
// image (TransformBoxes). SampleTransformer reports it for each image it
// writes (SampleDecoder::LastGeometry).
//
// A source point (x, y), in pixels of the image as decoded (after EXIF
// orientation), lands at (x × scale_x − offset_x, y × scale_y − offset_y)
// in the resized image, then moves by (shift_x, shift_y) (a random crop
// with padding), then x → output_width − x when flipped (and y →
// output_height − y when flipped vertically).
//
// Box rule (documented in config/README.md, "Sample fields"): a box is
// moved as its two corners, clipped to the output, and dropped when nothing
// of it is left inside (zero width or height after clipping); the boxes
// kept stay in their order. With padding, a box is first clipped to the
// resized image, so that it never covers padding.
//
// Keypoint rule: each point is moved the same way and keeps its row (the
// rows are the instance's joints, in order); a point that lands outside the
// image (or in padding) keeps the coordinates it was mapped to, and its
// visibility (the third column, when given) becomes 0.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/transform_spec.h"

namespace conveyor {

struct SampleGeometry {
  int source_width = 0;
  int source_height = 0;
  int output_width = 0;
  int output_height = 0;
  double scale_x = 1, scale_y = 1;
  double offset_x = 0, offset_y = 0;
  // Random crop with padding: where the resized image's origin lands in the
  // output (in [−padding, padding]) and what fills the rest.
  int shift_x = 0, shift_y = 0;
  PadMode pad_mode = PadMode::kConstant;
  bool flip = false;
  bool vflip = false;  // y → output_height − y, after the rest
};

// Padding: which of `size` pixels output index i reads, i lying up to
// `size` outside [0, size); −1 for kConstant padding (the fill).
int PaddedIndex(int i, int size, PadMode mode);

enum class BoxFormat {
  kXyxy,  // [x0, y0, x1, y1]
  kXywh,  // [x, y, width, height]
};

// Moves `boxes` (rows of `columns` ≥ 4 numbers: the box in `format`, in
// source pixels or with `normalized` in fractions of the source's width and
// height, then anything that goes with the box, such as its class) to the
// output: *out gets the rows kept, `columns` float32 each, the box in the
// same format and normalisation (fractions of the output's size), the other
// columns as they were. Non-finite coordinates drop their row.
void TransformBoxes(const SampleGeometry& g, BoxFormat format, bool normalized,
                    std::span<const double> boxes, size_t columns, std::vector<float>* out);

// Moves keypoints (rows of `columns` ≥ 2 numbers: x and y in source pixels,
// or with `normalized` in fractions of the source's width and height, then
// anything else, the third being the visibility) to the output by the
// keypoint rule above: *out gets every row, as float32.
void TransformKeypoints(const SampleGeometry& g, bool normalized, std::span<const double> points,
                        size_t columns, std::vector<float>* out);

}  // namespace conveyor
