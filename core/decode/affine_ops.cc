#include "core/decode/affine_ops.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace conveyor {
namespace {

// CPython's math.degrees / math.radians factors (Modules/mathmodule.c).
constexpr double kPi = 3.14159265358979323846;
constexpr double kRadiansToDegrees = 180.0 / kPi;
constexpr double kDegreesToRadians = kPi / 180.0;

// Products whose sum must round like Python's (and Pillow's): kept out of line so that no compiler
// contracts `p * q + r` into an FMA, which rounds once instead of twice.
[[gnu::noinline]] double Mul(double p, double q) { return p * q; }

// Python's float % (the result takes the divisor's sign).
double PythonMod(double v, double divisor) {
  double r = std::fmod(v, divisor);
  if (r != 0) {
    if ((divisor < 0) != (r < 0)) r += divisor;
  } else {
    r = std::copysign(0.0, divisor);
  }
  return r;
}

// Python's round(v, 15): the decimal correctly rounded (ties to even) to 15 places, read back.
double PythonRound15(double v) {
  char text[64];
  const auto printed = std::to_chars(text, text + sizeof(text), v, std::chars_format::fixed, 15);
  if (printed.ec != std::errc()) return v;
  double rounded = v;
  std::from_chars(text, printed.ptr, rounded);
  return rounded;
}

// The arguments of torchvision's _get_inverse_affine_matrix (scale is always 1 here).
struct TorchvisionAffine {
  double center_x = 0;
  double center_y = 0;
  double angle = 0;  // degrees
  double translate_x = 0;
  double translate_y = 0;
  double shear_x = 0;  // degrees
  double shear_y = 0;  // degrees
};

// torchvision.transforms.functional._get_inverse_affine_matrix(inverted=True, scale=1), operation
// for operation.
InverseAffine TorchvisionInverse(const TorchvisionAffine& p) {
  const double rot = p.angle * kDegreesToRadians;
  const double sx = p.shear_x * kDegreesToRadians;
  const double sy = p.shear_y * kDegreesToRadians;
  const double a = std::cos(rot - sy) / std::cos(sy);
  const double b = -std::cos(rot - sy) * std::tan(sx) / std::cos(sy) - std::sin(rot);
  const double c = std::sin(rot - sy) / std::cos(sy);
  const double d = -std::sin(rot - sy) * std::tan(sx) / std::cos(sy) + std::cos(rot);
  InverseAffine m;
  m.a[0] = d;
  m.a[1] = -b;
  m.a[2] = 0.0;
  m.a[3] = -c;
  m.a[4] = a;
  m.a[5] = 0.0;
  const double ux = -p.center_x - p.translate_x;
  const double uy = -p.center_y - p.translate_y;
  m.a[2] += Mul(m.a[0], ux) + Mul(m.a[1], uy);
  m.a[5] += Mul(m.a[3], ux) + Mul(m.a[4], uy);
  m.a[2] += p.center_x;
  m.a[5] += p.center_y;
  return m;
}

// PIL's Image.rotate(degrees) matrix (centre (w / 2, h / 2), no translation, not expanded).
InverseAffine PilRotateInverse(double degrees, int width, int height) {
  const double angle = -(PythonMod(degrees, 360.0) * kDegreesToRadians);
  const double cos_a = PythonRound15(std::cos(angle));
  const double sin_a = PythonRound15(std::sin(angle));
  const double minus_sin_a = PythonRound15(-std::sin(angle));
  const double cx = width / 2.0;
  const double cy = height / 2.0;
  InverseAffine m;
  m.a[0] = cos_a;
  m.a[1] = sin_a;
  m.a[3] = minus_sin_a;
  m.a[4] = cos_a;
  m.a[2] = Mul(cos_a, -cx) + Mul(sin_a, -cy) + 0.0;
  m.a[5] = Mul(minus_sin_a, -cx) + Mul(cos_a, -cy) + 0.0;
  m.a[2] += cx;
  m.a[5] += cy;
  return m;
}

// _apply_op's shear angle: math.degrees(math.atan(magnitude)).
double ShearDegrees(double magnitude) { return std::atan(magnitude) * kRadiansToDegrees; }

bool IsIdentity(const InverseAffine& m) {
  return m.a[0] == 1 && m.a[1] == 0 && m.a[2] == 0 && m.a[3] == 0 && m.a[4] == 1 && m.a[5] == 0;
}

// Pillow's COORD: -1 below zero (and for NaN), else truncation; huge values stay out of range.
int Coord(double v) {
  if (!(v >= 0.0)) return -1;
  return v < 2147483647.0 ? static_cast<int>(v) : std::numeric_limits<int>::max();
}

// Pillow's 16.16 FIX (floor of v * 65536 + 0.5).
int64_t Fix(double v) { return static_cast<int64_t>(std::floor(v * 65536.0 + 0.5)); }

// Writes src's pixel (x, y) (in range, or else fill) to out.
class PixelSource {
 public:
  PixelSource(const uint8_t* data, int width, int height, Rgb8 fill)
      : data_(data), width_(width), height_(height), fill_(fill) {}

  bool HasColumn(int64_t x) const { return x >= 0 && x < width_; }
  bool HasRow(int64_t y) const { return y >= 0 && y < height_; }

  void Copy(int64_t x, int64_t y, uint8_t* out) const {
    const uint8_t* in = data_ + (static_cast<size_t>(y) * width_ + static_cast<size_t>(x)) * 3;
    out[0] = in[0];
    out[1] = in[1];
    out[2] = in[2];
  }
  void CopyOrFill(int64_t x, int64_t y, uint8_t* out) const {
    if (HasColumn(x) && HasRow(y)) {
      Copy(x, y, out);
    } else {
      Fill(out);
    }
  }
  void Fill(uint8_t* out) const {
    out[0] = fill_.r;
    out[1] = fill_.g;
    out[2] = fill_.b;
  }

 private:
  const uint8_t* data_;
  int width_;
  int height_;
  Rgb8 fill_;
};

// Pillow's ImagingScaleAffine (no cross terms): column and row positions are stepped separately
// from the first pixel centre, in floating point.
void WarpScale(const PixelSource& src, RgbView dst, const double* a) {
  const double x_first = a[2] + a[0] * 0.5;
  double yo = a[5] + a[4] * 0.5;
  for (int y = 0; y < dst.height; ++y, yo += a[4]) {
    const int yi = Coord(yo);
    uint8_t* out = dst.row(y);
    double xo = x_first;
    for (int x = 0; x < dst.width; ++x, xo += a[0], out += 3) {
      src.CopyOrFill(Coord(xo), yi, out);
    }
  }
}

// Pillow's check_fixed: does the image corner (x, y) map inside +-32768?
bool CornerFitsFixedPoint(const double* a, int x, int y) {
  return std::fabs(Mul(x, a[0]) + Mul(y, a[1]) + a[2]) < 32768.0 &&
         std::fabs(Mul(x, a[3]) + Mul(y, a[4]) + a[5]) < 32768.0;
}

bool FitsFixedPoint(const double* a, int width, int height) {
  return CornerFitsFixedPoint(a, 0, 0) && CornerFitsFixedPoint(a, width, height) &&
         CornerFitsFixedPoint(a, 0, height) && CornerFitsFixedPoint(a, width, 0);
}

// Pillow's affine_fixed: 16.16 fixed point from the first pixel centre, stepped per pixel and row;
// the source pixel is the integer part (arithmetic shift, so floor).
void WarpFixed(const PixelSource& src, RgbView dst, const double* a) {
  const int64_t a0 = Fix(a[0]);
  const int64_t a1 = Fix(a[1]);
  const int64_t a3 = Fix(a[3]);
  const int64_t a4 = Fix(a[4]);
  int64_t row_x = Fix(a[2] + a[0] * 0.5 + a[1] * 0.5);
  int64_t row_y = Fix(a[5] + a[3] * 0.5 + a[4] * 0.5);
  for (int y = 0; y < dst.height; ++y, row_x += a1, row_y += a4) {
    uint8_t* out = dst.row(y);
    int64_t xx = row_x;
    int64_t yy = row_y;
    for (int x = 0; x < dst.width; ++x, xx += a0, yy += a3, out += 3) {
      src.CopyOrFill(xx >> 16, yy >> 16, out);
    }
  }
}

// Pillow's floating-point affine engine (images whose corners leave the fixed-point range).
void WarpFloat(const PixelSource& src, RgbView dst, const double* a) {
  double row_x = a[2] + a[1] * 0.5 + a[0] * 0.5;
  double row_y = a[5] + a[4] * 0.5 + a[3] * 0.5;
  for (int y = 0; y < dst.height; ++y, row_x += a[1], row_y += a[4]) {
    uint8_t* out = dst.row(y);
    double xx = row_x;
    double yy = row_y;
    for (int x = 0; x < dst.width; ++x, xx += a[0], yy += a[3], out += 3) {
      src.CopyOrFill(Coord(xx), Coord(yy), out);
    }
  }
}

}  // namespace

InverseAffine AffineOpInverse(AffineOp op, double magnitude, int width, int height) {
  TorchvisionAffine p;
  switch (op) {
    case AffineOp::kShearX: p.shear_x = ShearDegrees(magnitude); break;
    case AffineOp::kShearY: p.shear_y = ShearDegrees(magnitude); break;
    case AffineOp::kTranslateX:
      p.center_x = width * 0.5;
      p.center_y = height * 0.5;
      p.translate_x = std::trunc(magnitude);
      break;
    case AffineOp::kTranslateY:
      p.center_x = width * 0.5;
      p.center_y = height * 0.5;
      p.translate_y = std::trunc(magnitude);
      break;
    case AffineOp::kRotate: return PilRotateInverse(magnitude, width, height);
  }
  return TorchvisionInverse(p);
}

void WarpNearest(const uint8_t* src, RgbView dst, const InverseAffine& inverse, Rgb8 fill) {
  if (dst.width <= 0 || dst.height <= 0) return;
  const PixelSource source(src, dst.width, dst.height, fill);
  const double* a = inverse.a;
  if (a[1] == 0 && a[3] == 0) {
    WarpScale(source, dst, a);
  } else if (FitsFixedPoint(a, dst.width, dst.height)) {
    WarpFixed(source, dst, a);
  } else {
    WarpFloat(source, dst, a);
  }
}

void ApplyAffineOp(RgbView image, AffineOp op, double magnitude, std::vector<uint8_t>* scratch) {
  if (image.width <= 0 || image.height <= 0) return;
  const InverseAffine inverse = AffineOpInverse(op, magnitude, image.width, image.height);
  if (IsIdentity(inverse)) return;
  const size_t bytes = image.bytes();
  if (scratch->size() < bytes) scratch->resize(bytes);
  std::memcpy(scratch->data(), image.data, bytes);
  WarpNearest(scratch->data(), image, inverse, Rgb8{});
}

void MapPoint(AffineOp op, double magnitude, int width, int height, double* x, double* y) {
  const InverseAffine inverse = AffineOpInverse(op, magnitude, width, height);
  const double* a = inverse.a;
  const double det = a[0] * a[4] - a[1] * a[3];
  if (!std::isfinite(det) || det == 0) return;
  const double dx = *x - a[2];
  const double dy = *y - a[5];
  *x = (a[4] * dx - a[1] * dy) / det;
  *y = (a[0] * dy - a[3] * dx) / det;
}

}  // namespace conveyor
