// PipelineConfig: one named pipeline the engine can run streams of — a
// dataset, the per-sample transform, batch limits and the error policy.
// Built and validated once (ValidatePipelineConfig), then shared read-only by
// every stream of the pipeline (thread-safe because immutable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/data/dataset_index.h"
#include "core/data/sample_fields.h"
#include "core/data/sample_source.h"
#include "core/data/sampler.h"
#include "core/decode/transform_spec.h"
#include "core/engine/output_cache.h"

namespace conveyor {

// What happens when a sample fails. Only errors of the sample obey it: not
// found, permission denied, not a regular file, larger than max_file_bytes,
// not a JPEG or corrupt. Errors of the system (IsSystemError in
// core/base/posix_error.h: out of fds or memory, I/O errors) are never a sample's
// fault: the engine retries them with backoff (EngineOptions' retry fields)
// and then ends the stream with UNAVAILABLE naming the file and the errno,
// whatever the policy, so no batch ever silently loses a sample to them.
enum class ErrorPolicy {
  // A sample that cannot be read or decoded is left out of its batch and
  // reported with the batch (the batch comes out short and says so). The
  // stream ends with an error once more than max_failure_rate of its samples
  // failed, judged after failure_rate_min_samples samples.
  kSkip,
  // The first failing sample (in stream order) ends the stream with an error
  // naming it; the batches before it are delivered.
  kFailFast,
};

const char* ToString(ErrorPolicy p);

// Largest max_batch_size a pipeline accepts.
inline constexpr uint32_t kMaxBatchSize = 65536;

struct PipelineConfig {
  std::string name;
  // Sizes, labels and the names samples are shown by (failures, statuses,
  // log lines). A `source` may read by names of its own: a URL dataset's
  // source reads the URLs with their secrets, which these names lack.
  std::shared_ptr<const DatasetIndex> dataset;
  TransformSpec transform;
  ErrorPolicy error_policy = ErrorPolicy::kSkip;
  double max_failure_rate = 0.05;
  uint64_t failure_rate_min_samples = 256;
  uint32_t max_batch_size = 1024;
  // Files larger than this are refused by the fetch stage.
  uint64_t max_file_bytes = 64ull << 20;
  // Where sample bytes come from. Null: the dataset's files, read whole
  // (FileSampleSource over `dataset` with max_file_bytes).
  std::shared_ptr<const SampleSource> source;
  // The epoch permutation of the sampler (core/data/sampler.h). Null: the global
  // shuffle (EpochPermutation); tar shards bring their shard-local order.
  std::shared_ptr<const EpochOrder> order;
  // The pipeline's output served from a cache (`cache_output`,
  // core/engine/output_cache.h): whoever builds the config makes
  // `output_cache` with cache_output_bytes when cache_output is set. Only
  // for a transform that draws nothing (RandomDraws): ValidatePipelineConfig
  // refuses the others. The cache is shared by every stream of the pipeline
  // and is itself thread-safe (the one mutable thing a config points to).
  // Sources that read over the network are not cached (no cheap identity).
  // What each sample brings beside its media (core/data/sample_fields.h),
  // written into the batch's field areas (BatchLayout) and delivered in
  // order; `parts` (required with fields) says where a sample's media and
  // members lie in what `source` reads. Not with cache_output (the cache
  // keeps media only).
  std::vector<SampleFieldSpec> fields;
  std::shared_ptr<const SampleParts> parts;
  // What a stream may choose for itself (core/engine/stream_choices.h):
  // output sizes as (height, width) and element types besides the
  // transform's own, which are always allowed. Empty: only those.
  std::vector<std::pair<int, int>> allowed_sizes;
  std::vector<DType> allowed_dtypes;
  bool cache_output = false;
  uint64_t cache_output_bytes = uint64_t{1} << 30;
  std::shared_ptr<OutputCache> output_cache;
};

// InvalidArgument naming the bad field, or OK.
absl::Status ValidatePipelineConfig(const PipelineConfig& config);

// A validated pipeline with default policies over the ImageFolder at `root`
// (for tools and benchmarks; the daemon builds its pipelines from config).
absl::StatusOr<std::shared_ptr<const PipelineConfig>> ImageFolderPipeline(
    const std::string& name, const std::string& root, const TransformSpec& transform);

}  // namespace conveyor
