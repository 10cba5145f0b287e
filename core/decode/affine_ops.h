// Affine ops: the geometric ops of torchvision's TrivialAugmentWide (ShearX, ShearY, TranslateX,
// TranslateY, Rotate) applied in place to a packed RGB image, pixel for pixel as torchvision 0.14's
// autoaugment._apply_op applies them to a PIL image with TrivialAugmentWide's defaults
// (InterpolationMode.NEAREST, fill None, i.e. 0):
//   ShearX/ShearY  F.affine(angle 0, translate (0, 0), scale 1,
//                  shear (degrees(atan(m)), 0) / (0, degrees(atan(m))), center (0, 0))
//   TranslateX/Y   F.affine(angle 0, translate (int(m), 0) / (0, int(m)), scale 1, shear 0)
//   Rotate         F.rotate(m), i.e. PIL Image.rotate(m) about the centre, not expanded
// which end in Pillow 9.4's Image.transform(AFFINE, NEAREST) (libImaging/Geometry.c,
// ImagingTransformAffine). Reproduced exactly:
//   - the inverse matrix, with torchvision's _get_inverse_affine_matrix and PIL's rotate formulas
//     operation for operation in double precision with the same libm calls (atan, sin, cos, tan),
//     Python's degrees/radians constants, float % 360.0 and round(v, 15) of PIL's rotate;
//   - Pillow's three NEAREST engines and its choice between them: the "scale" engine when the
//     matrix has no cross terms (a1 == a3 == 0), the 16.16 fixed-point engine when all four image
//     corners map inside +-32768, and the floating-point engine otherwise, each with its own
//     pixel-centre offset, rounding and incremental stepping;
//   - outside the source the fill colour.
// Pillow's transpose fast paths of rotate (angles 90/180/270 on squares, 180 on any image) give
// the same pixels as the affine path for those angles, so the affine path serves them too.
// Pillow's fixed-point engine accumulates in int32, ours in int64: the same values wherever
// Pillow's do not overflow (its corner check keeps them in range). Byte-identical to torchvision
// on PIL images in every case tests/python/test_affine_ops_vs_torchvision.py runs (all bins of
// both signs, quarter turns, random magnitudes and sizes, all three engines); no tolerance.
// Exactness needs unfused arithmetic: the matrix products that are summed go through an
// out-of-line multiply so that no compiler contracts them into FMAs (the pixel loops only add,
// or multiply by 0.5, which is exact).
//
// Thread-safety: pure functions of their arguments; calls on distinct images and scratch buffers
// may run concurrently.
#pragma once

#include <cstdint>
#include <vector>

#include "core/decode/rgb_view.h"

namespace conveyor {

enum class AffineOp { kShearX, kShearY, kTranslateX, kTranslateY, kRotate };

// The map from output to source that Pillow's AFFINE transform takes, in continuous pixel
// coordinates (the image's top-left corner is (0, 0); pixel (i, j) covers [i, i + 1) x [j, j + 1)
// and has its centre at (i + 0.5, j + 0.5)): the output pixel whose centre is (x, y) takes the
// source pixel that contains (a[0] x + a[1] y + a[2], a[3] x + a[4] y + a[5]).
struct InverseAffine {
  double a[6] = {1, 0, 0, 0, 1, 0};
};

struct Rgb8 {
  uint8_t r = 0;
  uint8_t g = 0;
  uint8_t b = 0;
};

// The inverse matrix torchvision hands to Pillow for `op` with signed `magnitude` on a
// width x height image. A NaN magnitude gives a NaN matrix (torchvision too, though it rejects a
// NaN translation); WarpNearest then fills the whole image, as Pillow does.
InverseAffine AffineOpInverse(AffineOp op, double magnitude, int width, int height);

// Pillow's ImagingTransformAffine with NEAREST on an RGB image: dst (same size as src) gets,
// per pixel, the source pixel `inverse` points at, or `fill` where it points outside. src is
// packed RGB of dst.width x dst.height and must not overlap dst.
void WarpNearest(const uint8_t* src, RgbView dst, const InverseAffine& inverse, Rgb8 fill);

// TrivialAugmentWide's op with its signed magnitude, as torchvision's _apply_op applies it to a
// PIL image (NEAREST, fill 0): shear magnitude m -> shear angle degrees(atan(m)) about (0, 0);
// translate by int(m) pixels; rotate by m degrees (counter-clockwise) about the centre, not
// expanded. In place; `scratch` receives a copy of the source and only grows (no allocation
// once it has held the largest image). Magnitude 0 leaves the image untouched.
void ApplyAffineOp(RgbView image, AffineOp op, double magnitude, std::vector<uint8_t>* scratch);

// Where the source point (*x, *y) lands in the output of ApplyAffineOp(op, magnitude) on a
// width x height image, in InverseAffine's continuous coordinates (corner (0, 0), pixel (i, j)
// spans [i, i + 1) x [j, j + 1)): the forward map, i.e. the exact inverse of AffineOpInverse's
// matrix, evaluated in double. The source pixel whose centre (i + 0.5, j + 0.5) maps to (X, Y)
// shows up in output pixel (floor X, floor Y), give or take the one pixel nearest sampling may
// shift, drop or repeat it (exact for translations, half turns, and quarter turns of images whose
// sides differ by an even number). To follow a box, map its four corners and take their bounds.
// Points outside the image are mapped all the same; a degenerate (or NaN) matrix leaves them
// unchanged.
void MapPoint(AffineOp op, double magnitude, int width, int height, double* x, double* y);

}  // namespace conveyor
