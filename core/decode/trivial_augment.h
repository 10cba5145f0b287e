// TrivialAugmentWide (Müller & Hutter, 2021) as torchvision 0.14 applies it
// to a PIL image: one op drawn uniformly from 14, one magnitude drawn
// uniformly from its `bins` values (torch.linspace's float32 values as its
// scalar loop computes them; its vectorised loop, which torch uses for some
// entries depending on the CPU, may differ by a few units in the last place), its
// sign drawn for the signed ops, then the op applied with NEAREST
// interpolation and fill 0 (core/decode/color_ops.h, core/decode/affine_ops.h).
// The draws come from the sample's Rng, in the order op, bin, sign, so a
// sample's result depends only on (seed, epoch, index).
//
// Thread-safety: pure functions; the scratch vector is the caller's.
#pragma once

#include <cstdint>
#include <vector>

#include "core/base/rng.h"
#include "core/decode/rgb_view.h"

namespace conveyor {

enum class TrivialAugmentOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
};
inline constexpr int kTrivialAugmentOps = 14;
// torchvision's names: "Identity", "ShearX", …, "Equalize".
const char* ToString(TrivialAugmentOp op);

struct TrivialAugmentDraw {
  TrivialAugmentOp op = TrivialAugmentOp::kIdentity;
  int bin = 0;           // index into the op's magnitudes (0 for the unsized ops)
  double magnitude = 0;  // signed, as torchvision passes it to _apply_op
};

// torch.linspace(start, end, steps)[index] in float32, as torch computes it.
float TorchLinspace(float start, float end, int steps, int index);
// The magnitude of `op` at `bin` of `bins`, before the sign; and whether the
// op draws a sign.
double TrivialAugmentMagnitude(TrivialAugmentOp op, int bins, int bin);
bool TrivialAugmentSigned(TrivialAugmentOp op);

// REQUIRES: bins >= 2.
TrivialAugmentDraw DrawTrivialAugment(int bins, Rng& rng);
void ApplyTrivialAugment(const TrivialAugmentDraw& draw, RgbView image,
                         std::vector<uint8_t>* scratch);
// Whether the op moves pixels (shear, translate, rotate), so that boxes and
// masks would no longer match the image.
bool MovesPixels(TrivialAugmentOp op);

}  // namespace conveyor
