#include "core/engine/stream_choices.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/text_escape.h"

namespace conveyor {

namespace {

std::string SizeText(int h, int w) { return absl::StrCat(h, "x", w); }

std::string AllowedSizes(const PipelineConfig& p) {
  std::vector<std::string> sizes = {SizeText(p.transform.output_height, p.transform.output_width)};
  for (const auto& [h, w] : p.allowed_sizes) sizes.push_back(SizeText(h, w));
  return absl::StrJoin(sizes, ", ");
}

std::string AllowedDtypes(const PipelineConfig& p) {
  std::vector<std::string> types = {ToString(p.transform.dtype)};
  for (DType d : p.allowed_dtypes) types.push_back(ToString(d));
  return absl::StrJoin(types, ", ");
}

}  // namespace

absl::StatusOr<std::shared_ptr<const PipelineConfig>> PipelineForStream(
    std::shared_ptr<const PipelineConfig> pipeline, const StreamChoices& choices) {
  const PipelineConfig& p = *pipeline;
  const TransformSpec& t = p.transform;
  const int height =
      choices.output_height != 0 ? static_cast<int>(choices.output_height) : t.output_height;
  const int width =
      choices.output_width != 0 ? static_cast<int>(choices.output_width) : t.output_width;
  const bool other_size = height != t.output_height || width != t.output_width;
  if (other_size) {
    if ((choices.output_height == 0) != (choices.output_width == 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output size: give both height and width (pipeline ", p.name, " allows ",
                       AllowedSizes(p), ")"));
    }
    const bool allowed = std::find(p.allowed_sizes.begin(), p.allowed_sizes.end(),
                                   std::make_pair(height, width)) != p.allowed_sizes.end();
    if (!allowed) {
      return absl::InvalidArgumentError(absl::StrCat("output size ", SizeText(height, width),
                                                     " is not allowed by pipeline ", p.name,
                                                     " (allowed_sizes: ", AllowedSizes(p), ")"));
    }
  }
  const DType dtype = choices.dtype.value_or(t.dtype);
  const bool other_dtype = dtype != t.dtype;
  if (other_dtype && std::find(p.allowed_dtypes.begin(), p.allowed_dtypes.end(), dtype) ==
                         p.allowed_dtypes.end()) {
    return absl::InvalidArgumentError(absl::StrCat("dtype ", ToString(dtype),
                                                   " is not allowed by pipeline ", p.name,
                                                   " (allowed_dtypes: ", AllowedDtypes(p), ")"));
  }
  std::vector<SampleFieldSpec> fields;
  bool other_fields = false;
  if (choices.fields.has_value()) {
    std::set<std::string> wanted;
    for (const std::string& name : *choices.fields) {
      const bool known = std::any_of(p.fields.begin(), p.fields.end(),
                                     [&](const SampleFieldSpec& f) { return f.name == name; });
      if (!known) {
        std::vector<std::string> names;
        for (const SampleFieldSpec& f : p.fields) names.push_back(f.name);
        return absl::InvalidArgumentError(absl::StrCat(
            "field '", EscapeText(name, 80), "' is not a field of pipeline ", p.name,
            " (its fields: ", names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
      }
      if (!wanted.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("field '", EscapeText(name, 80), "' is asked for twice"));
      }
    }
    for (const SampleFieldSpec& f : p.fields) {
      if (wanted.count(f.name) != 0) fields.push_back(f);
    }
    other_fields = fields.size() != p.fields.size();
  }
  if (!other_size && !other_dtype && !other_fields) return pipeline;

  auto view = std::make_shared<PipelineConfig>(p);
  TransformSpec& v = view->transform;
  if (other_size) {
    v.output_height = height;
    v.output_width = width;
    if (v.mode == AugmentMode::kEval) {
      const int old_side = std::max(t.output_height, t.output_width);
      const int new_side = std::max(height, width);
      const int64_t scaled =
          (static_cast<int64_t>(t.resize_size) * new_side + old_side - 1) / old_side;
      v.resize_size = static_cast<int>(
          std::clamp<int64_t>(scaled, new_side, std::max(new_side, kMaxOutputSide)));
    }
  }
  v.dtype = dtype;
  if (other_fields) view->fields = std::move(fields);
  if (absl::Status st = ValidatePipelineConfig(*view); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stream's choices make an invalid pipeline: ", st.message()));
  }
  return std::shared_ptr<const PipelineConfig>(std::move(view));
}

}  // namespace conveyor
