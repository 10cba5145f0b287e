// Colour ops: the per-image colour augmentations (ColorJitter, RandAugment,
// TrivialAugment, AutoAugment, GaussianBlur, RandomGrayscale, ...) applied to
// a decoded RgbView in place, computing what torchvision 0.14's
// torchvision.transforms.functional computes on a PIL image (Pillow 9.4).
//
//   AdjustBrightness  F.adjust_brightness   ImageEnhance.Brightness
//   AdjustContrast    F.adjust_contrast     ImageEnhance.Contrast
//   AdjustSaturation  F.adjust_saturation   ImageEnhance.Color
//   AdjustSharpness   F.adjust_sharpness    ImageEnhance.Sharpness
//   AdjustHue         F.adjust_hue          convert("HSV"), H += np.uint8(f * 255)
//   ToGrayscale       F.rgb_to_grayscale(img, 3)   convert("L"), three times
//   Posterize         F.posterize           ImageOps.posterize
//   Solarize          F.solarize            ImageOps.solarize
//   AutoContrast      F.autocontrast        ImageOps.autocontrast (cutoff 0)
//   Equalize          F.equalize            ImageOps.equalize
//   GaussianBlur      F.gaussian_blur       tensor path: float32 conv2d, round
//
// Exactness: every op but GaussianBlur is byte-exact with torchvision on PIL
// (tests/python/test_color_ops_vs_torchvision.py checks it): the blends
// (brightness, contrast, saturation, sharpness) redo Image.blend's float32
// arithmetic (in1 + (float)factor * (in2 - in1), clamped to 0..255 and
// truncated), the grey values are convert("L")'s
// (19595 R + 38470 G + 7471 B + 0x8000) >> 16, the contrast grey is
// int(mean + 0.5) of that L image, sharpness smooths with PIL's 3x3 SMOOTH
// kernel (1 1 1 / 1 5 1 / 1 1 1, / 13) in float32 leaving the outermost rows
// and columns as they are (and the whole image when it is under 3x3), and
// hue redoes Pillow's rgb2hsv / hsv2rgb float and double arithmetic. Exactness
// assumes IEEE float and double in round-to-nearest without -ffast-math; the
// products that Pillow rounds before an addition are kept unfused, so it
// holds where the compiler forms fused multiply-adds (-march=haswell, AArch64).
// GaussianBlur is a separable float32 filter; torchvision convolves with the
// outer product of the two 1-D kernels and computes the kernel with another
// exp(), so a value near .5 may round the other way: at most 1 level off, on
// well under 1% of the bytes (the Python test measures and bounds it).
//
// Preconditions (the caller validates; a call outside them leaves the image
// unchanged and never reads or writes out of bounds): image.data points at
// image.bytes() bytes when width and height are > 0; factors are finite and
// representable as float; hue_factor in [-0.5, 0.5]; bits in [0, 8];
// GaussianBlur as documented at the function.
//
// Thread-safety: pure functions of the image they are given and their
// arguments; no global state. Scratch buffers are passed in by the caller so
// that a worker reuses them across images without allocating; one scratch
// buffer must not be shared by concurrent calls.
#pragma once

#include <cstdint>
#include <vector>

#include "core/decode/rgb_view.h"

namespace conveyor {

// Image.blend(black, image, factor): 0 gives black, 1 the image.
void AdjustBrightness(RgbView image, double factor);

// Image.blend(grey, image, factor), grey = int(mean of convert("L") + 0.5).
void AdjustContrast(RgbView image, double factor);

// Image.blend(convert("L") as RGB, image, factor): 0 gives ToGrayscale.
void AdjustSaturation(RgbView image, double factor);

// Rotates the hue by hue_factor turns, in PIL's 8-bit HSV: H += the low byte
// of trunc(hue_factor * 255) (numpy 1.24's float -> uint8 cast on x86), mod
// 256. The HSV round trip itself is lossy, as in PIL, so hue_factor 0 is not
// the identity. Precondition: -0.5 <= hue_factor <= 0.5.
void AdjustHue(RgbView image, double hue_factor);

// convert("L") written to all three channels.
void ToGrayscale(RgbView image);

// Image.blend(image.filter(SMOOTH), image, factor). *scratch is resized to
// 2 * image.stride() bytes.
void AdjustSharpness(RgbView image, double factor, std::vector<uint8_t>* scratch);

// Keeps the top `bits` bits of every byte (0 gives black, 8 the identity).
// Precondition: 0 <= bits <= 8.
void Posterize(RgbView image, int bits);

// Every byte v with v >= threshold (compared as real numbers) becomes
// 255 - v: threshold 0 inverts all, any threshold > 255 none.
void Solarize(RgbView image, double threshold);

// Per channel, maps [min, max] linearly onto [0, 255] with PIL's LUT
// int(v * scale - min * scale), scale = 255.0 / (max - min), in double,
// clamped; a channel with a single value is left as it is.
void AutoContrast(RgbView image);

// Per channel, PIL's histogram equalisation LUT; a channel with one value,
// or whose step (pixels less those of the top value) / 255 is 0, is left as
// it is.
void Equalize(RgbView image);

// F.gaussian_blur(img, [kernel_width, kernel_height], [sigma_x, sigma_y]):
// reflect padding (no edge repeat), float32 taps exp(-x^2 / (2 sigma^2))
// normalised to sum 1, rounded half to even.
// Preconditions: kernel_width and kernel_height odd and >= 1;
// kernel_width / 2 < image.width and kernel_height / 2 < image.height (the
// limit of reflect padding; torchvision raises beyond it); sigma_x and
// sigma_y finite and > 0. *scratch is resized to
// 3 * width * (kernel_height + 1) + 3 * (width + kernel_width - 1) +
// kernel_width + kernel_height floats.
void GaussianBlur(RgbView image, int kernel_width, int kernel_height, double sigma_x,
                  double sigma_y, std::vector<float>* scratch);

}  // namespace conveyor
