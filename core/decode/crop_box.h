// Where each output sample comes from in its source image, in full-resolution
// pixels: torchvision's RandomResizedCrop box (train) and its Resize +
// CenterCrop window (eval). Pure functions of their inputs (and, for train, of
// the Rng draws); safe to call from any thread.
#pragma once

#include "core/base/rng.h"
#include "core/decode/transform_spec.h"

namespace conveyor {

// An integer crop: rows [top, top + height), columns [left, left + width).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
  bool operator==(const CropBox&) const = default;
};

// torchvision.transforms.RandomResizedCrop.get_params, rule for rule, with the
// uniform draws taken from `rng` instead of torch's generator:
//   up to 10 tries: target_area = W*H*U(scale_min, scale_max);
//     aspect = exp(U(log ratio_min, log ratio_max));
//     w = round(sqrt(target_area*aspect)), h = round(sqrt(target_area/aspect))
//     (round half to even, like Python's round);
//     if 0 < w <= W and 0 < h <= H: top = U{0..H-h}, left = U{0..W-w}; done.
//   fallback, the centre crop: aspect clamped to [ratio_min, ratio_max].
// Per try the draws are, in order: NextDouble (scale), NextDouble (ratio) and,
// on success, Below(H-h+1) (top) then Below(W-w+1) (left).
// `fallback` (optional, may be null) is set to whether the centre-crop
// fallback was used.
// REQUIRES: width > 0, height > 0, spec validated.
CropBox RandomResizedCropBox(int width, int height, const TransformSpec& spec, Rng& rng,
                             bool* fallback = nullptr);

// Eval geometry: torchvision Resize(resize_size) resizes the whole image to
// resized_width x resized_height (shorter side = resize_size, longer side
// int(resize_size * long / short), exactly as torchvision computes it), then
// CenterCrop(output) keeps the output-sized window at (top, left), with
// top = round((resized_height - output_height) / 2) (half to even).
// The resampler computes only that window of the resize (same filter centres,
// same supports), so nothing outside it is ever produced.
struct EvalWindow {
  int resized_width = 0;
  int resized_height = 0;
  int top = 0;
  int left = 0;
  bool operator==(const EvalWindow&) const = default;
};

// REQUIRES: width > 0, height > 0, spec validated (resize_size >= output size).
EvalWindow EvalCenterWindow(int width, int height, const TransformSpec& spec);

}  // namespace conveyor
