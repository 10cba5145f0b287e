// One `pipelines.<name>` entry: its dataset, the per-sample transform
// (core/decode/transform_spec.h), batch limits and error policy
// (core/engine/pipeline_config.h), and the kind-specific fields
// (media_section.cc). Bounds the core enforces come from its constants.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// The config's own bounds where the core takes any positive value.
constexpr uint64_t kMaxPixelsBound = uint64_t{1} << 40;
constexpr uint64_t kMaxFailureMinSamples = uint64_t{1} << 40;
constexpr double kMinDecodeSeconds = 0.001;
constexpr double kMaxNormalisation = 1e6;
constexpr double kMinStd = 1e-12;
constexpr double kMinCropBound = 1e-9;
constexpr double kMaxRatio = 1e9;

// Getters of the transform's and the pipeline config's members.
template <typename M>
auto Tr(M TransformSpec::*m) {
  return [m](PipelineSpec& p) -> M& { return p.config.transform.*m; };
}
template <typename M>
auto Pc(M PipelineConfig::*m) {
  return [m](PipelineSpec& p) -> M& { return p.config.*m; };
}

std::string ListType(size_t count, double lo, double hi) {
  return absl::StrCat(count, " numbers ", FormatNumberBound(lo), "–", FormatNumberBound(hi));
}

// mean, std: three numbers within [lo, hi].
FieldSpec<PipelineSpec> Triple(std::string key, std::array<float, 3> TransformSpec::*m, double lo,
                               double hi, std::string doc) {
  const std::array<float, 3> d = TransformSpec{}.*m;
  return schema::Custom<PipelineSpec>(
      std::move(key), ListType(3, lo, hi),
      Quoted(absl::StrCat("[", FormatNumberBound(d[0]), ", ", FormatNumberBound(d[1]), ", ",
                          FormatNumberBound(d[2]), "]")),
      std::move(doc),
      [m, lo, hi](const YamlFields& y, const YAML::Node& n, const std::string& field,
                  PipelineSpec* p) -> absl::Status {
        std::vector<double> v;
        RETURN_IF_ERROR(y.ReadNumbers(n, field, 3, lo, hi, &v));
        for (int i = 0; i < 3; ++i) (p->config.transform.*m)[i] = static_cast<float>(v[i]);
        return absl::OkStatus();
      });
}

// scale, ratio: [min, max] within [lo, hi], min <= max.
FieldSpec<PipelineSpec> Range(std::string key, double TransformSpec::*min_member,
                              double TransformSpec::*max_member, double lo, double hi,
                              std::string doc) {
  const TransformSpec d;
  return schema::Custom<PipelineSpec>(
      std::move(key), absl::StrCat("`[min, max]`, ", ListType(2, lo, hi), ", min ≤ max"),
      Quoted(absl::StrCat("[", FormatNumberBound(d.*min_member), ", ",
                          FormatNumberBound(d.*max_member), "]")),
      std::move(doc),
      [=](const YamlFields& y, const YAML::Node& n, const std::string& field,
          PipelineSpec* p) -> absl::Status {
        std::vector<double> v;
        RETURN_IF_ERROR(y.ReadNumbers(n, field, 2, lo, hi, &v));
        if (v[0] > v[1]) return y.Error(field, n, "min must not exceed max");
        p->config.transform.*min_member = v[0];
        p->config.transform.*max_member = v[1];
        return absl::OkStatus();
      });
}

absl::Status ReadSize(const YamlFields& y, const YAML::Node& s, const std::string& field,
                      PipelineSpec* p) {
  TransformSpec& t = p->config.transform;
  if (s.IsSequence()) {
    if (s.size() != 2) {
      return y.Error(field, s, absl::StrCat("expected [height, width], got ", s.size(), " items"));
    }
    RETURN_IF_ERROR(y.ReadUintAs(s[0], field + "[0]", 1, kMaxOutputSide, &t.output_height));
    return y.ReadUintAs(s[1], field + "[1]", 1, kMaxOutputSide, &t.output_width);
  }
  RETURN_IF_ERROR(y.ReadUintAs(s, field, 1, kMaxOutputSide, &t.output_height));
  t.output_width = t.output_height;
  return absl::OkStatus();
}

// allowed_sizes: a list of sizes, each an integer or [h, w].
absl::Status ReadAllowedSizes(const YamlFields& y, const YAML::Node& n, const std::string& field,
                              PipelineSpec* p) {
  if (!n.IsSequence()) return y.Error(field, n, "expected a list of sizes, e.g. [160, [192, 256]]");
  std::vector<std::pair<int, int>>& sizes = p->config.allowed_sizes;
  sizes.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    int h = 0, w = 0;
    if (n[i].IsSequence()) {
      if (n[i].size() != 2) {
        return y.Error(at, n[i],
                       absl::StrCat("expected [height, width], got ", n[i].size(), " items"));
      }
      RETURN_IF_ERROR(y.ReadUintAs(n[i][0], at + "[0]", 1, kMaxOutputSide, &h));
      RETURN_IF_ERROR(y.ReadUintAs(n[i][1], at + "[1]", 1, kMaxOutputSide, &w));
    } else {
      RETURN_IF_ERROR(y.ReadUintAs(n[i], at, 1, kMaxOutputSide, &h));
      w = h;
    }
    if (std::find(sizes.begin(), sizes.end(), std::make_pair(h, w)) != sizes.end()) {
      return y.Error(at, n[i], absl::StrCat(h, "x", w, " is listed twice"));
    }
    sizes.emplace_back(h, w);
  }
  return absl::OkStatus();
}

absl::Status ReadAllowedDtypes(const YamlFields& y, const YAML::Node& n, const std::string& field,
                               PipelineSpec* p) {
  if (!n.IsSequence()) return y.Error(field, n, "expected a list, e.g. [uint8, float16]");
  const std::vector<std::string> names = {"uint8", "float32", "float16"};
  const DType types[] = {DType::kUint8, DType::kFloat32, DType::kFloat16};
  std::vector<DType>& out = p->config.allowed_dtypes;
  out.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    int k = 0;
    RETURN_IF_ERROR(y.ReadEnum(n[i], absl::StrCat(field, "[", i, "]"), names, &k));
    if (std::find(out.begin(), out.end(), types[k]) == out.end()) out.push_back(types[k]);
  }
  return absl::OkStatus();
}

const Section<PipelineSpec>& PipelineSection() {
  using schema::Bool;
  using schema::Custom;
  using schema::Enum;
  using schema::Manual;
  using schema::Number;
  using schema::Size;
  using schema::Uint;
  static const Section<PipelineSpec> kSection({
      Enum<PipelineSpec>(
          "kind", Tr(&TransformSpec::kind),
          std::vector<std::pair<std::string, MediaKind>>{{"image", MediaKind::kImage},
                                                         {"video", MediaKind::kVideo},
                                                         {"audio", MediaKind::kAudio}},
          "what the samples are"),
      Manual<PipelineSpec>("dataset", "map", "required", "where the samples come from")
          .WithSubRows(DatasetDocs()),
      Manual<PipelineSpec>("fields", "list of maps", "none",
                           "what each sample delivers beside its media, in order")
          .WithSubRows(FieldsDocs(), /*own=*/true, "[i]."),
      schema::Bool<PipelineSpec>("cache", &PipelineSpec::cache,
                                 "`false`: this pipeline's URL samples and remote shards "
                                 "bypass the daemon's `cache`"),
      schema::Bool<PipelineSpec>("relay_jpeg", &PipelineSpec::relay_jpeg,
                                 "keep re-laid copies of the JPEGs in the daemon's `cache`, so "
                                 "crops decode only the data they cover"),
      Custom<PipelineSpec>("augment", "`train` \\| `eval` \\| list of ops", "`train`",
                           "RandomResizedCrop and flip (`train`), resize and centre crop "
                           "(`eval`), or the ops in order",
                           ReadAugment),
      Custom<PipelineSpec>("size", absl::StrCat("integer or `[h, w]`, 1–", kMaxOutputSide),
                           Quoted(absl::StrCat(TransformSpec{}.output_height)),
                           "output size in pixels (or `height`/`width`)", ReadSize),
      Uint<PipelineSpec>("height", Tr(&TransformSpec::output_height), 1, kMaxOutputSide,
                         "output height"),
      Uint<PipelineSpec>("width", Tr(&TransformSpec::output_width), 1, kMaxOutputSide,
                         "output width"),
      Custom<PipelineSpec>("allowed_sizes", "list of sizes (integer or `[h, w]`)", "none",
                           "other output sizes a stream may ask for (progressive resizing)",
                           ReadAllowedSizes),
      Enum<PipelineSpec>("layout", Tr(&TransformSpec::layout),
                         std::vector<std::pair<std::string, Layout>>{{"nchw", Layout::kNCHW},
                                                                     {"nhwc", Layout::kNHWC}},
                         "memory layout of a batch"),
      Enum<PipelineSpec>(
          "dtype", Tr(&TransformSpec::dtype),
          std::vector<std::pair<std::string, DType>>{
              {"uint8", DType::kUint8}, {"float32", DType::kFloat32}, {"float16", DType::kFloat16}},
          "element type; floats are normalised"),
      Custom<PipelineSpec>("allowed_dtypes", "list of `uint8` \\| `float32` \\| `float16`", "none",
                           "other element types a stream may ask for", ReadAllowedDtypes),
      Triple("mean", &TransformSpec::mean, -kMaxNormalisation, kMaxNormalisation,
             "per-channel mean (RGB) for float outputs"),
      Triple("std", &TransformSpec::std, kMinStd, kMaxNormalisation,
             "per-channel standard deviation for float outputs"),
      Range("scale", &TransformSpec::scale_min, &TransformSpec::scale_max, kMinCropBound, 1.0,
            "`train`: area fraction of the random crop"),
      Range("ratio", &TransformSpec::ratio_min, &TransformSpec::ratio_max, kMinCropBound, kMaxRatio,
            "`train`: aspect ratio of the random crop"),
      Number<PipelineSpec>("flip_probability", Tr(&TransformSpec::flip_probability), 0, 1,
                           "`train`: chance of a horizontal flip"),
      Uint<PipelineSpec>("resize_size", Tr(&TransformSpec::resize_size), 1, kMaxOutputSide,
                         "`eval`: the shorter side is resized to this (≥ the output size)")
          .WithDefault("`ceil(max(h, w) × 256 / 224)` (256 for 224)")
          .InGroup("manual"),
      Bool<PipelineSpec>("dct_scaling", Tr(&TransformSpec::dct_scaling),
                         "let libjpeg decode at 1/2, 1/4 or 1/8 scale"),
      Uint<PipelineSpec>("max_pixels", Tr(&TransformSpec::max_pixels), 1, kMaxPixelsBound,
                         "images with more pixels are refused"),
      Size<PipelineSpec>("max_decode_memory", Tr(&TransformSpec::max_decode_memory),
                         kMinDecodeMemory, "working memory one worker may use to decode one image"),
      Number<PipelineSpec>("max_decode_seconds", Tr(&TransformSpec::max_decode_seconds),
                           kMinDecodeSeconds, kMaxDecodeSeconds,
                           "CPU seconds one worker may spend decoding one sample"),
      Uint<PipelineSpec>("max_batch_size", Pc(&PipelineConfig::max_batch_size), 1, kMaxBatchSize,
                         "the largest `batch_size` a client may ask for"),
      Enum<PipelineSpec>("error_policy", Pc(&PipelineConfig::error_policy),
                         std::vector<std::pair<std::string, ErrorPolicy>>{
                             {"skip", ErrorPolicy::kSkip}, {"fail_fast", ErrorPolicy::kFailFast}},
                         "what a bad sample does to its stream"),
      Number<PipelineSpec>("max_failure_rate", Pc(&PipelineConfig::max_failure_rate), 0, 1,
                           "`skip`: the tolerated share of bad samples"),
      Uint<PipelineSpec>("failure_rate_min_samples", Pc(&PipelineConfig::failure_rate_min_samples),
                         0, kMaxFailureMinSamples, "judged once a stream has seen this many"),
      Size<PipelineSpec>("max_file_bytes", Pc(&PipelineConfig::max_file_bytes), 1,
                         "larger files are refused by the fetch stage"),
      Bool<PipelineSpec>("cache_output", Pc(&PipelineConfig::cache_output),
                         "serve a deterministic pipeline's samples from a cache of its output"),
      Size<PipelineSpec>("cache_output_bytes", Pc(&PipelineConfig::cache_output_bytes), 1,
                         "`cache_output`: the bound of the cache, in memory"),
      Manual<PipelineSpec>("audio", "map", "none", "`kind: audio`: the clips")
          .WithSubRows(AudioDocs()),
  });
  return kSection;
}

}  // namespace

absl::Status ParsePipeline(const YamlFields& y, const std::string& name, const YAML::Node& n,
                           const DaemonConfig& c, PipelineSpec* p) {
  const std::string f = absl::StrCat("pipelines.", name);
  auto sub = [&](const char* key) { return absl::StrCat(f, ".", key); };
  const Section<PipelineSpec>& s = PipelineSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, f, VideoSection().keys()));
  PipelineConfig& pc = p->config;
  TransformSpec& t = pc.transform;
  pc.name = name;

  if (!n["dataset"]) {
    return y.Error(f, n, "missing `dataset` (give dataset.root, dataset.list or dataset.shards)");
  }
  RETURN_IF_ERROR(ParseDataset(y, sub("dataset"), n["dataset"], &p->dataset));
  if (!c.allowed_roots.empty()) {
    // Checked on the paths as written (".." folded, no file system access);
    // LoadPipelines checks again with symlinks resolved.
    for (const DatasetPath& dp : DatasetPaths(*p)) {
      bool ok = false;
      for (const std::string& allowed : c.allowed_roots) ok |= PathIsUnder(dp.path, allowed);
      if (!ok) {
        const YAML::Node at = absl::EndsWith(dp.field, ".list")     ? n["dataset"]["list"]
                              : absl::EndsWith(dp.field, ".shards") ? n["dataset"]["shards"]
                                                                    : n["dataset"]["root"];
        return y.Error(dp.field, at, OutsideAllowedRoots(dp.path, dp.path, c.allowed_roots));
      }
    }
  }

  if (n["fields"]) {
    RETURN_IF_ERROR(ParseFields(y, sub("fields"), n["fields"], p));
  }

  if (n["size"] && (n["height"] || n["width"])) {
    return y.Error(sub("size"), n["size"], "give either `size` or `height`/`width`, not both");
  }
  RETURN_IF_ERROR(s.ReadFields(y, n, f, p));

  if (n["audio"] && t.kind != MediaKind::kAudio) {
    return y.Error(sub("audio"), n["audio"], "is only for `kind: audio`");
  }
  if (t.kind == MediaKind::kAudio) {
    if (!n["dtype"]) t.dtype = DType::kFloat32;
    if (t.dtype != DType::kFloat32) {
      return y.Error(sub("dtype"), n["dtype"],
                     absl::StrCat("must be float32 for kind audio, got ", ToString(t.dtype)));
    }
    RETURN_IF_ERROR(ParseAudio(y, sub("audio"), n["audio"], &t));
  }

  if (p->augment_ops) {
    // The ops say it all: the preset's own keys would contradict them.
    for (const char* key : {"scale", "ratio", "flip_probability", "resize_size", "mean", "std"}) {
      if (n[key]) {
        return y.Error(sub(key), n[key],
                       "is set by `augment`'s ops when `augment` is a list (give it in the op)");
      }
    }
    if (t.kind != MediaKind::kImage) {
      return y.Error(sub("augment"), n["augment"], "a list of ops is for `kind: image`");
    }
    if (p->augment_normalizes) {
      if (!n["dtype"]) t.dtype = DType::kFloat32;
      if (t.dtype == DType::kUint8) {
        return y.Error(sub("dtype"), n["dtype"], "normalize makes floats: float32 or float16");
      }
    } else if (t.dtype != DType::kUint8) {
      // Floats without normalize: ToTensor's x / 255.
      t.mean = {0, 0, 0};
      t.std = {1, 1, 1};
    }
    if (t.mode == AugmentMode::kTrain) {
      // Unused by a crop; set as the preset sets it, so the same ops make
      // the same transform (and fingerprint).
      const int side = std::max(t.output_height, t.output_width);
      t.resize_size = std::min<int>(kMaxOutputSide, (side * 256 + 223) / 224);
    }
    if (t.mode == AugmentMode::kEval &&
        (t.resize_size < t.output_height || t.resize_size < t.output_width)) {
      return y.Error(
          sub("augment"), n["augment"],
          absl::StrCat("resize's size must be at least the output size (", t.output_height, "x",
                       t.output_width, "; no padding), got ", t.resize_size));
    }
  } else if (n["resize_size"]) {
    RETURN_IF_ERROR(s.ReadOne(y, n, f, "resize_size", p));
    if (t.mode == AugmentMode::kEval &&
        (t.resize_size < t.output_height || t.resize_size < t.output_width)) {
      return y.Error(
          sub("resize_size"), n["resize_size"],
          absl::StrCat("must be at least the output size in eval mode (", t.output_height, "x",
                       t.output_width, "; no padding), got ", t.resize_size));
    }
  } else {
    // torchvision's convention: resize to size/0.875 (224 → 256) before the
    // centre crop.
    const int side = std::max(t.output_height, t.output_width);
    t.resize_size = std::min<int>(kMaxOutputSide, (side * 256 + 223) / 224);
  }
  RETURN_IF_ERROR(ParseVideo(y, f, n, p));

  for (size_t i = 0; i < pc.fields.size(); ++i) {
    if (pc.fields[i].geometry != FieldGeometry::kNone && t.kind != MediaKind::kImage) {
      return y.Error(absl::StrCat(sub("fields"), "[", i, "].geometry"), n["fields"][i]["geometry"],
                     "boxes move with images: for `kind: image` only");
    }
    const bool moves =
        pc.fields[i].geometry != FieldGeometry::kNone || pc.fields[i].type == FieldType::kMask;
    if (moves && t.image_ops.trivial_augment()) {
      // Its shears and rotations are not followed by boxes, keypoints or masks.
      return y.Error(absl::StrCat(sub("fields"), "[", i, "]"), n["fields"][i],
                     "boxes, keypoints and masks do not follow trivial_augment_wide's shears, "
                     "translations and rotations: drop the op or the field's geometry");
    }
    if (pc.fields[i].type == FieldType::kAugment && t.kind != MediaKind::kImage) {
      return y.Error(absl::StrCat(sub("fields"), "[", i, "].type"), n["fields"][i]["type"],
                     "`augment` fields report what an image's augmentation drew: image "
                     "pipelines only");
    }
    if (pc.fields[i].type == FieldType::kMask && t.kind != MediaKind::kImage) {
      return y.Error(absl::StrCat(sub("fields"), "[", i, "].type"), n["fields"][i]["type"],
                     "masks move with images: for `kind: image` only");
    }
  }
  if (!pc.fields.empty() && pc.cache_output) {
    return y.Error(sub("cache_output"), n["cache_output"],
                   "is not available with `fields` (the output cache keeps media only)");
  }
  if (!pc.fields.empty() && p->relay_jpeg) {
    return y.Error(sub("relay_jpeg"), n["relay_jpeg"],
                   "is not available with `fields` (the copies hold the image member only)");
  }

  // cache_output: only a pipeline whose output is the same every epoch.
  if (n["cache_output_bytes"] && !pc.cache_output) {
    return y.Error(sub("cache_output_bytes"), n["cache_output_bytes"],
                   "is only for `cache_output: true`");
  }
  if (pc.cache_output) {
    if (const char* draws = RandomDraws(t); draws != nullptr) {
      return y.Error(
          sub("cache_output"), n["cache_output"],
          absl::StrCat("refused: this pipeline draws random numbers (", draws,
                       "), so its output differs every epoch and cannot be cached; only "
                       "deterministic pipelines may set it (augment: eval; video clip_start "
                       "center or start; audio crop centre)"));
    }
  }

  if (t.kind == MediaKind::kAudio && !pc.allowed_sizes.empty()) {
    return y.Error(sub("allowed_sizes"), n["allowed_sizes"],
                   "is for image and video pipelines (audio clips have no size)");
  }
  for (DType d : pc.allowed_dtypes) {
    if (t.kind != MediaKind::kImage && d != t.dtype) {
      return y.Error(sub("allowed_dtypes"), n["allowed_dtypes"],
                     absl::StrCat(ToString(t.kind), " pipelines deliver ", ToString(t.dtype),
                                  " only, not ", ToString(d)));
    }
  }

  // The core's own check, as the last word (names the transform field).
  if (absl::Status st = ValidateTransformSpec(t); !st.ok()) {
    return y.Error(f, n, std::string(st.message()));
  }
  // Every size a stream may choose must suit the ops too (a blur's kernel,
  // reflect padding).
  for (const auto& [h, w] :
       t.image_ops.any() ? pc.allowed_sizes : std::vector<std::pair<int, int>>()) {
    TransformSpec sized = t;
    sized.output_height = h;
    sized.output_width = w;
    sized.resize_size = std::max({t.resize_size, h, w});  // eval's scales with the size
    if (absl::Status st = ValidateTransformSpec(sized); !st.ok()) {
      return y.Error(sub("allowed_sizes"), n["allowed_sizes"],
                     absl::StrCat(h, "x", w, ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

std::vector<FieldDoc> PipelineDocs() {
  std::vector<FieldDoc> rows;
  for (const FieldDoc& r : PipelineSection().Docs()) {
    // The video fields come before `audio`, as the reference lists them.
    if (r.field.rfind("audio.", 0) == 0 && rows.back().field.rfind("audio.", 0) != 0) {
      for (const FieldDoc& v : VideoSection().Docs()) rows.push_back(v);
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace conveyor::server
