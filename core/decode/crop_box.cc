#include "core/decode/crop_box.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace conveyor {

namespace {

// Python's int(round(x)) for the non-negative values used here.
int RoundHalfEven(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

CropBox RandomResizedCropBox(int width, int height, const TransformSpec& spec, Rng& rng,
                             bool* fallback) {
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_rmin = std::log(spec.ratio_min);
  const double log_rmax = std::log(spec.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.Uniform(spec.scale_min, spec.scale_max);
    const double aspect = std::exp(rng.Uniform(log_rmin, log_rmax));
    const double w_real = std::sqrt(target_area * aspect);
    const double h_real = std::sqrt(target_area / aspect);
    // Compare as doubles first: a huge scale_max must not overflow the int cast.
    if (!(w_real < static_cast<double>(width) + 1) || !(h_real < static_cast<double>(height) + 1)) {
      continue;
    }
    const int w = RoundHalfEven(w_real);
    const int h = RoundHalfEven(h_real);
    if (w > 0 && w <= width && h > 0 && h <= height) {
      CropBox box;
      box.height = h;
      box.width = w;
      box.top = static_cast<int>(rng.Below(static_cast<uint64_t>(height - h) + 1));
      box.left = static_cast<int>(rng.Below(static_cast<uint64_t>(width - w) + 1));
      if (fallback != nullptr) *fallback = false;
      return box;
    }
  }
  // Centre crop with the aspect ratio clamped into [ratio_min, ratio_max].
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int w = width;
  int h = height;
  if (in_ratio < spec.ratio_min) {
    h = std::clamp(RoundHalfEven(w / spec.ratio_min), 1, height);
  } else if (in_ratio > spec.ratio_max) {
    w = std::clamp(RoundHalfEven(h * spec.ratio_max), 1, width);
  }
  CropBox box;
  box.height = h;
  box.width = w;
  box.top = (height - h) / 2;
  box.left = (width - w) / 2;
  if (fallback != nullptr) *fallback = true;
  return box;
}

EvalWindow EvalCenterWindow(int width, int height, const TransformSpec& spec) {
  // torchvision _compute_resized_output_size: new_long = int(size * long / short),
  // a true division of two integers followed by truncation.
  const int64_t size = spec.resize_size;
  EvalWindow win;
  if (width <= height) {
    win.resized_width = static_cast<int>(size);
    win.resized_height =
        static_cast<int>(static_cast<double>(size * height) / static_cast<double>(width));
  } else {
    win.resized_height = static_cast<int>(size);
    win.resized_width =
        static_cast<int>(static_cast<double>(size * width) / static_cast<double>(height));
  }
  // CenterCrop: int(round((resized - crop) / 2.0)), Python's half-to-even round.
  win.top = RoundHalfEven((win.resized_height - spec.output_height) / 2.0);
  win.left = RoundHalfEven((win.resized_width - spec.output_width) / 2.0);
  return win;
}

}  // namespace conveyor
