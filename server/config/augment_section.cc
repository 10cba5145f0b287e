// A pipeline's `augment`: a preset (`train`, `eval`) or an ordered list of
// torchvision-style ops, mapped onto the transform of the decoders
// (core/decode/transform_spec.h). The transform runs crop/resize → random
// crop with padding → horizontal flip → vertical flip → colour jitter →
// grayscale → Gaussian blur → TrivialAugmentWide → normalize, so a list must
// name its ops in that order (each once); what it does not name does not
// happen.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

struct Op {
  const char* name;
  int rank;  // its place in the fused pass
  std::vector<std::string> keys;
};

const std::vector<Op>& Ops() {
  static const std::vector<Op> kOps = {
      {"random_resized_crop", 0, {"op", "scale", "ratio"}},
      {"resize", 0, {"op", "size"}},
      {"center_crop", 1, {"op"}},
      {"random_crop", 2, {"op", "padding", "padding_mode", "fill"}},
      {"horizontal_flip", 3, {"op", "p"}},
      {"vertical_flip", 4, {"op", "p"}},
      {"color_jitter", 5, {"op", "brightness", "contrast", "saturation", "hue", "p"}},
      {"grayscale", 6, {"op", "p"}},
      {"gaussian_blur", 7, {"op", "kernel_size", "sigma", "p"}},
      {"trivial_augment_wide", 8, {"op", "num_magnitude_bins"}},
      {"normalize", 9, {"op", "mean", "std"}},
  };
  return kOps;
}

std::string OpNames() {
  std::vector<std::string> names;
  for (const Op& op : Ops()) names.push_back(op.name);
  return absl::StrJoin(names, ", ");
}

absl::Status ReadRange(const YamlFields& y, const YAML::Node& n, const std::string& field,
                       double lo, double hi, double* min, double* max) {
  std::vector<double> v;
  RETURN_IF_ERROR(y.ReadNumbers(n, field, 2, lo, hi, &v));
  if (v[0] > v[1]) return y.Error(field, n, "min must not exceed max");
  *min = v[0];
  *max = v[1];
  return absl::OkStatus();
}

absl::Status ReadTriple(const YamlFields& y, const YAML::Node& n, const std::string& field,
                        double lo, double hi, std::array<float, 3>* out) {
  std::vector<double> v;
  RETURN_IF_ERROR(y.ReadNumbers(n, field, 3, lo, hi, &v));
  for (int i = 0; i < 3; ++i) (*out)[i] = static_cast<float>(v[i]);
  return absl::OkStatus();
}

// A colour jitter factor as torchvision's ColorJitter takes it: a number v
// (the range [max(lo, centre − v), centre + v]) or a [min, max] pair.
absl::Status ReadJitter(const YamlFields& y, const YAML::Node& n, const std::string& field,
                        double centre, double lo, double hi, double* min, double* max) {
  if (n.IsSequence()) return ReadRange(y, n, field, lo, hi, min, max);
  double v = 0;
  RETURN_IF_ERROR(y.ReadDouble(n, field, 0, hi - centre, &v));
  *min = std::max(lo, centre - v);
  *max = centre + v;
  return absl::OkStatus();
}

absl::Status ReadColorJitter(const YamlFields& y, const YAML::Node& m, const std::string& at,
                             ImageOpsSpec* o) {
  o->jitter_probability = 1;
  if (m["p"]) RETURN_IF_ERROR(y.ReadDouble(m["p"], at + ".p", 0, 1, &o->jitter_probability));
  if (m["brightness"]) {
    RETURN_IF_ERROR(ReadJitter(y, m["brightness"], at + ".brightness", 1, 0, 1e6,
                               &o->brightness_min, &o->brightness_max));
  }
  if (m["contrast"]) {
    RETURN_IF_ERROR(ReadJitter(y, m["contrast"], at + ".contrast", 1, 0, 1e6, &o->contrast_min,
                               &o->contrast_max));
  }
  if (m["saturation"]) {
    RETURN_IF_ERROR(ReadJitter(y, m["saturation"], at + ".saturation", 1, 0, 1e6,
                               &o->saturation_min, &o->saturation_max));
  }
  if (m["hue"]) {
    RETURN_IF_ERROR(ReadJitter(y, m["hue"], at + ".hue", 0, -0.5, 0.5, &o->hue_min, &o->hue_max));
  }
  if (!m["brightness"] && !m["contrast"] && !m["saturation"] && !m["hue"]) {
    return y.Error(at, m,
                   "color_jitter changes nothing: give brightness, contrast, saturation "
                   "or hue");
  }
  return absl::OkStatus();
}

absl::Status ReadGaussianBlur(const YamlFields& y, const YAML::Node& m, const std::string& at,
                              ImageOpsSpec* o) {
  if (!m["kernel_size"]) {
    return y.Error(at, m, "missing `kernel_size` (odd: a number, or [width, height])");
  }
  const YAML::Node k = m["kernel_size"];
  if (k.IsSequence()) {
    std::vector<double> v;
    RETURN_IF_ERROR(y.ReadNumbers(k, at + ".kernel_size", 2, 1, 2 * kMaxOutputSide, &v));
    o->blur_kernel_width = static_cast<int>(v[0]);
    o->blur_kernel_height = static_cast<int>(v[1]);
    if (v[0] != o->blur_kernel_width || v[1] != o->blur_kernel_height) {
      return y.Error(at + ".kernel_size", k, "must be whole numbers");
    }
  } else {
    RETURN_IF_ERROR(
        y.ReadUintAs(k, at + ".kernel_size", 1, 2 * kMaxOutputSide, &o->blur_kernel_width));
    o->blur_kernel_height = o->blur_kernel_width;
  }
  if (o->blur_kernel_width % 2 == 0 || o->blur_kernel_height % 2 == 0) {
    return y.Error(at + ".kernel_size", k, "must be odd (torchvision's GaussianBlur)");
  }
  if (m["sigma"]) {
    if (m["sigma"].IsSequence()) {
      RETURN_IF_ERROR(ReadRange(y, m["sigma"], at + ".sigma", 1e-6, 1e6, &o->blur_sigma_min,
                                &o->blur_sigma_max));
    } else {
      RETURN_IF_ERROR(y.ReadDouble(m["sigma"], at + ".sigma", 1e-6, 1e6, &o->blur_sigma_min));
      o->blur_sigma_max = o->blur_sigma_min;
    }
  }
  o->blur_probability = 1;
  if (m["p"]) RETURN_IF_ERROR(y.ReadDouble(m["p"], at + ".p", 0, 1, &o->blur_probability));
  return absl::OkStatus();
}

absl::Status ReadRandomCrop(const YamlFields& y, const YAML::Node& m, const std::string& at,
                            ImageOpsSpec* o) {
  if (!m["padding"]) {
    return y.Error(at, m,
                   "missing `padding` (pixels on each side; the window is the output "
                   "size)");
  }
  RETURN_IF_ERROR(y.ReadUintAs(m["padding"], at + ".padding", 1, kMaxCropPadding, &o->padding));
  if (m["padding_mode"]) {
    int k = 0;
    RETURN_IF_ERROR(
        y.ReadEnum(m["padding_mode"], at + ".padding_mode", {"constant", "edge", "reflect"}, &k));
    o->padding_mode = static_cast<PadMode>(k);
  }
  if (m["fill"]) RETURN_IF_ERROR(y.ReadUintAs(m["fill"], at + ".fill", 0, 255, &o->fill));
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadAugment(const YamlFields& y, const YAML::Node& n, const std::string& field,
                         PipelineSpec* p) {
  TransformSpec& t = p->config.transform;
  if (!n.IsSequence()) {
    int k = 0;
    RETURN_IF_ERROR(y.ReadEnum(n, field, {"train", "eval"}, &k));
    t.mode = k == 0 ? AugmentMode::kTrain : AugmentMode::kEval;
    return absl::OkStatus();
  }
  p->augment_ops = true;
  if (n.size() == 0) {
    return y.Error(field, n, "an empty list: start with random_resized_crop or resize");
  }
  // What a list does not name does not happen.
  t.flip_probability = 0;
  t.vflip_probability = 0;
  t.grayscale_probability = 0;
  t.image_ops = ImageOpsSpec();
  int last_rank = -1;
  std::string last_name;
  bool resize = false, center_crop = false;
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    const YAML::Node m = n[i];
    if (!m.IsMap() || !m["op"]) {
      return y.Error(at, m, absl::StrCat("expected a map with `op` (one of ", OpNames(), ")"));
    }
    std::string name;
    RETURN_IF_ERROR(y.ReadString(m["op"], at + ".op", &name));
    const Op* op = nullptr;
    for (const Op& o : Ops()) {
      if (name == o.name) op = &o;
    }
    if (op == nullptr) {
      return y.Error(at + ".op", m["op"],
                     absl::StrCat("unknown op '", name, "' (known: ", OpNames(), ")"));
    }
    RETURN_IF_ERROR(y.CheckMap(m, at, op->keys));
    if (i == 0 && op->rank != 0) {
      return y.Error(at + ".op", m["op"], "the first op must be random_resized_crop or resize");
    }
    if (op->rank <= last_rank) {
      return y.Error(at + ".op", m["op"],
                     absl::StrCat("'", name, "' after '", last_name,
                                  "': the ops run in the order crop or resize, center_crop, "
                                  "random_crop, horizontal_flip, vertical_flip, color_jitter, "
                                  "grayscale, gaussian_blur, trivial_augment_wide, normalize, "
                                  "each at most once"));
    }
    last_rank = op->rank;
    last_name = name;
    const std::string opname = name;
    if (opname == "random_resized_crop") {
      t.mode = AugmentMode::kTrain;
      if (m["scale"]) {
        RETURN_IF_ERROR(
            ReadRange(y, m["scale"], at + ".scale", 1e-9, 1.0, &t.scale_min, &t.scale_max));
      }
      if (m["ratio"]) {
        RETURN_IF_ERROR(
            ReadRange(y, m["ratio"], at + ".ratio", 1e-9, 1e9, &t.ratio_min, &t.ratio_max));
      }
    } else if (opname == "resize") {
      t.mode = AugmentMode::kEval;
      resize = true;
      if (!m["size"]) return y.Error(at, m, "missing `size` (the shorter side after resizing)");
      RETURN_IF_ERROR(y.ReadUintAs(m["size"], at + ".size", 1, kMaxOutputSide, &t.resize_size));
    } else if (opname == "center_crop") {
      if (!resize) return y.Error(at + ".op", m["op"], "center_crop follows resize");
      center_crop = true;
    } else if (opname == "random_crop") {
      RETURN_IF_ERROR(ReadRandomCrop(y, m, at, &t.image_ops));
    } else if (opname == "color_jitter") {
      RETURN_IF_ERROR(ReadColorJitter(y, m, at, &t.image_ops));
    } else if (opname == "gaussian_blur") {
      RETURN_IF_ERROR(ReadGaussianBlur(y, m, at, &t.image_ops));
    } else if (opname == "trivial_augment_wide") {
      t.image_ops.trivial_augment_bins = 31;
      if (m["num_magnitude_bins"]) {
        RETURN_IF_ERROR(y.ReadUintAs(m["num_magnitude_bins"], at + ".num_magnitude_bins", 2,
                                     kMaxTrivialAugmentBins, &t.image_ops.trivial_augment_bins));
      }
    } else if (opname == "normalize") {
      if (m["mean"]) RETURN_IF_ERROR(ReadTriple(y, m["mean"], at + ".mean", -1e6, 1e6, &t.mean));
      if (m["std"]) RETURN_IF_ERROR(ReadTriple(y, m["std"], at + ".std", 1e-12, 1e6, &t.std));
      p->augment_normalizes = true;
    } else {
      double prob = 0.5;
      if (m["p"]) RETURN_IF_ERROR(y.ReadDouble(m["p"], at + ".p", 0, 1, &prob));
      if (opname == "horizontal_flip") t.flip_probability = prob;
      if (opname == "vertical_flip") t.vflip_probability = prob;
      if (opname == "grayscale") {
        if (!m["p"]) prob = 0.1;  // torchvision's RandomGrayscale default
        t.grayscale_probability = prob;
      }
    }
  }
  if (resize && !center_crop) {
    return y.Error(field, n, "resize is followed by center_crop (the output is `size`)");
  }
  return absl::OkStatus();
}

}  // namespace conveyor::server
