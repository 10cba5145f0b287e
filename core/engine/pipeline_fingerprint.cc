#include "core/engine/pipeline_fingerprint.h"

#include "absl/strings/str_format.h"
#include "core/decode/decoder_versions.h"
#include "core/engine/output_cache.h"

namespace conveyor {

std::vector<std::pair<std::string, std::string>> PipelineFingerprint(const PipelineConfig& p) {
  std::vector<std::pair<std::string, std::string>> parts;
  parts.emplace_back("dataset", absl::StrFormat("digest=%s;samples=%d", p.dataset->ContentDigest(),
                                                p.dataset->size()));
  parts.emplace_back("transform", TransformFingerprint(p.transform));
  parts.emplace_back(
      "samples", absl::StrFormat("error_policy=%s;max_failure_rate=%a;failure_rate_min_samples=%d;"
                                 "max_file_bytes=%d",
                                 ToString(p.error_policy), p.max_failure_rate,
                                 p.failure_rate_min_samples, p.max_file_bytes));
  parts.emplace_back("order", p.order == nullptr ? "global" : "dataset");
  std::string fields;
  for (const SampleFieldSpec& f : p.fields) {
    absl::StrAppendFormat(&fields, "%s=%s,%s,%s,%d;", f.name, ToString(f.type), f.member,
                          f.required ? "required" : "optional", f.max_bytes);
  }
  parts.emplace_back("fields", std::move(fields));
  parts.emplace_back("decoders", DecoderVersions());
  return parts;
}

}  // namespace conveyor
