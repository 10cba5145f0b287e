// SampleGeometry: where a decoded sample's pixels came from in its source
// image — the scale and offset of the crop/resize and the flip — so that
// annotations drawn on the source (detection boxes) can be moved with the
// image (TransformBoxes). SampleTransformer reports it for each image it
// writes (SampleDecoder::LastGeometry).
//
// A source point (x, y), in pixels of the image as decoded (after EXIF
// orientation), lands at (x × scale_x − offset_x, y × scale_y − offset_y)
// in the output, then x → output_width − x when flipped (and y →
// output_height − y when flipped vertically).
//
// Box rule (documented in config/README.md, "Sample fields"): a box is
// moved as its two corners, clipped to the output, and dropped when nothing
// of it is left inside (zero width or height after clipping); the boxes
// kept stay in their order.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace conveyor {

struct SampleGeometry {
  int source_width = 0;
  int source_height = 0;
  int output_width = 0;
  int output_height = 0;
  double scale_x = 1, scale_y = 1;
  double offset_x = 0, offset_y = 0;
  bool flip = false;
  bool vflip = false;  // y → output_height − y, after the rest
};

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

}  // namespace conveyor
