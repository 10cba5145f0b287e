#include "core/decode/trivial_augment.h"

#include <cmath>

#include "core/decode/affine_ops.h"
#include "core/decode/color_ops.h"

namespace conveyor {

const char* ToString(TrivialAugmentOp op) {
  switch (op) {
    case TrivialAugmentOp::kIdentity: return "Identity";
    case TrivialAugmentOp::kShearX: return "ShearX";
    case TrivialAugmentOp::kShearY: return "ShearY";
    case TrivialAugmentOp::kTranslateX: return "TranslateX";
    case TrivialAugmentOp::kTranslateY: return "TranslateY";
    case TrivialAugmentOp::kRotate: return "Rotate";
    case TrivialAugmentOp::kBrightness: return "Brightness";
    case TrivialAugmentOp::kColor: return "Color";
    case TrivialAugmentOp::kContrast: return "Contrast";
    case TrivialAugmentOp::kSharpness: return "Sharpness";
    case TrivialAugmentOp::kPosterize: return "Posterize";
    case TrivialAugmentOp::kSolarize: return "Solarize";
    case TrivialAugmentOp::kAutoContrast: return "AutoContrast";
    case TrivialAugmentOp::kEqualize: return "Equalize";
  }
  return "?";
}

float TorchLinspace(float start, float end, int steps, int index) {
  if (steps == 1) return start;
  // torch's CPU kernel: the first half counted up from start, the second
  // down from end, with the step in float32.
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  if (index < halfway) return start + step * static_cast<float>(index);
  return end - step * static_cast<float>(steps - index - 1);
}

bool TrivialAugmentSigned(TrivialAugmentOp op) {
  switch (op) {
    case TrivialAugmentOp::kShearX:
    case TrivialAugmentOp::kShearY:
    case TrivialAugmentOp::kTranslateX:
    case TrivialAugmentOp::kTranslateY:
    case TrivialAugmentOp::kRotate:
    case TrivialAugmentOp::kBrightness:
    case TrivialAugmentOp::kColor:
    case TrivialAugmentOp::kContrast:
    case TrivialAugmentOp::kSharpness: return true;
    default: return false;
  }
}

bool MovesPixels(TrivialAugmentOp op) {
  switch (op) {
    case TrivialAugmentOp::kShearX:
    case TrivialAugmentOp::kShearY:
    case TrivialAugmentOp::kTranslateX:
    case TrivialAugmentOp::kTranslateY:
    case TrivialAugmentOp::kRotate: return true;
    default: return false;
  }
}

double TrivialAugmentMagnitude(TrivialAugmentOp op, int bins, int bin) {
  switch (op) {
    case TrivialAugmentOp::kShearX:
    case TrivialAugmentOp::kShearY:
    case TrivialAugmentOp::kBrightness:
    case TrivialAugmentOp::kColor:
    case TrivialAugmentOp::kContrast:
    case TrivialAugmentOp::kSharpness: return TorchLinspace(0.0f, 0.99f, bins, bin);
    case TrivialAugmentOp::kTranslateX:
    case TrivialAugmentOp::kTranslateY: return TorchLinspace(0.0f, 32.0f, bins, bin);
    case TrivialAugmentOp::kRotate: return TorchLinspace(0.0f, 135.0f, bins, bin);
    case TrivialAugmentOp::kPosterize: {
      // 8 - round(arange(bins) / ((bins - 1) / 6)), float32, ties to even.
      const float q = static_cast<float>(bin) / static_cast<float>((bins - 1) / 6.0);
      return 8 - static_cast<int>(std::nearbyint(q));
    }
    case TrivialAugmentOp::kSolarize: return TorchLinspace(255.0f, 0.0f, bins, bin);
    default: return 0;
  }
}

TrivialAugmentDraw DrawTrivialAugment(int bins, Rng& rng) {
  TrivialAugmentDraw d;
  d.op = static_cast<TrivialAugmentOp>(rng.Below(kTrivialAugmentOps));
  const bool sized = d.op != TrivialAugmentOp::kIdentity &&
                     d.op != TrivialAugmentOp::kAutoContrast && d.op != TrivialAugmentOp::kEqualize;
  if (sized) {
    d.bin = static_cast<int>(rng.Below(static_cast<uint64_t>(bins)));
    d.magnitude = TrivialAugmentMagnitude(d.op, bins, d.bin);
  }
  if (TrivialAugmentSigned(d.op) && rng.Below(2) == 1) d.magnitude = -d.magnitude;
  return d;
}

void ApplyTrivialAugment(const TrivialAugmentDraw& d, RgbView image,
                         std::vector<uint8_t>* scratch) {
  const double m = d.magnitude;
  switch (d.op) {
    case TrivialAugmentOp::kIdentity: return;
    case TrivialAugmentOp::kShearX: return ApplyAffineOp(image, AffineOp::kShearX, m, scratch);
    case TrivialAugmentOp::kShearY: return ApplyAffineOp(image, AffineOp::kShearY, m, scratch);
    case TrivialAugmentOp::kTranslateX:
      return ApplyAffineOp(image, AffineOp::kTranslateX, m, scratch);
    case TrivialAugmentOp::kTranslateY:
      return ApplyAffineOp(image, AffineOp::kTranslateY, m, scratch);
    case TrivialAugmentOp::kRotate: return ApplyAffineOp(image, AffineOp::kRotate, m, scratch);
    case TrivialAugmentOp::kBrightness: return AdjustBrightness(image, 1.0 + m);
    case TrivialAugmentOp::kColor: return AdjustSaturation(image, 1.0 + m);
    case TrivialAugmentOp::kContrast: return AdjustContrast(image, 1.0 + m);
    case TrivialAugmentOp::kSharpness: return AdjustSharpness(image, 1.0 + m, scratch);
    case TrivialAugmentOp::kPosterize: return Posterize(image, static_cast<int>(m));
    case TrivialAugmentOp::kSolarize: return Solarize(image, m);
    case TrivialAugmentOp::kAutoContrast: return AutoContrast(image);
    case TrivialAugmentOp::kEqualize: return Equalize(image);
  }
}

}  // namespace conveyor
