#include "core/engine/pipeline_config.h"

#include "absl/strings/str_format.h"

namespace conveyor {

const char* ToString(ErrorPolicy p) { return p == ErrorPolicy::kSkip ? "skip" : "fail_fast"; }

absl::Status ValidatePipelineConfig(const PipelineConfig& c) {
  if (c.name.empty()) return absl::InvalidArgumentError("pipeline name: must not be empty");
  if (c.dataset == nullptr || c.dataset->size() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("pipeline %s: dataset is empty", c.name));
  }
  if (c.order != nullptr && c.order->size() != c.dataset->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline %s: its epoch order permutes %d samples, its dataset has %d",
                        c.name, c.order->size(), c.dataset->size()));
  }
  if (!(c.max_failure_rate >= 0.0 && c.max_failure_rate <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline %s: max_failure_rate %g must be within [0, 1]", c.name, c.max_failure_rate));
  }
  if (c.max_batch_size == 0 || c.max_batch_size > kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline %s: max_batch_size %d must be within [1, %d]", c.name,
                        c.max_batch_size, kMaxBatchSize));
  }
  if (c.max_file_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pipeline %s: max_file_bytes must be positive", c.name));
  }
  if (absl::Status s = ValidateTransformSpec(c.transform); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("pipeline %s: %s", c.name, s.message()));
  }
  if (c.cache_output || c.output_cache != nullptr) {
    if (const char* draws = RandomDraws(c.transform); draws != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pipeline %s: cache_output: refused for a pipeline that draws random numbers (%s): "
          "its output differs every epoch; only deterministic pipelines (augment: eval; video "
          "clip_start center or start; audio crop centre) may cache their output",
          c.name, draws));
    }
  }
  if (absl::Status s = ValidateFieldSpecs(c.fields); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("pipeline %s: %s", c.name, s.message()));
  }
  if (!c.fields.empty() && c.parts == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline %s: fields are declared but no SampleParts locates them", c.name));
  }
  if (!c.fields.empty() && (c.cache_output || c.output_cache != nullptr)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline %s: cache_output is not available with fields (the cache keeps media only)",
        c.name));
  }
  if (c.cache_output && c.output_cache == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pipeline %s: cache_output is set but no output_cache was made for it", c.name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PipelineConfig>> ImageFolderPipeline(
    const std::string& name, const std::string& root, const TransformSpec& transform) {
  auto index = DatasetIndex::LoadImageFolder(root);
  if (!index.ok()) return index.status();
  auto p = std::make_shared<PipelineConfig>();
  p->name = name;
  p->dataset = *std::move(index);
  p->transform = transform;
  if (absl::Status s = ValidatePipelineConfig(*p); !s.ok()) return s;
  return std::shared_ptr<const PipelineConfig>(std::move(p));
}

}  // namespace conveyor
