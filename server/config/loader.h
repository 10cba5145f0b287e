// The steps of conveyord's config that touch the file system, after the pure
// parse of server/config/config.h: reading the config file, checking the dataset
// paths against the disk (symlinks resolved, they must stay under
// allowed_roots), and loading every dataset's index. Errors name the config
// field: "FILE: field pipelines.x.dataset.root: …".
//
// Thread-safety: free functions without shared state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/pipeline_config.h"
#include "server/config/config.h"
#include "server/config/system_memory.h"

namespace conveyor::server {

// Reads the config file `path` and parses it (ParseConfig; relative paths
// resolve against the file's directory). A file that cannot be read is the
// errno's status (PosixError) naming the path.
absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path, const SystemInfo& system);

// With allowed_roots set: every dataset path (DatasetPaths), with the
// symlinks of its existing prefix resolved, must lie under one of the allowed
// roots (resolved the same way), so that no link inside an allowed root leads
// outside it. InvalidArgument naming the field and both paths otherwise.
absl::Status CheckAllowedRoots(const DaemonConfig& config);

// What tells the datasets of pipelines apart: pipelines with equal keys
// share one loaded index (LoadPipelines). An image folder's key includes
// its pipeline's media kind (the kind chooses the files it lists).
std::string DatasetLoadKey(const PipelineSpec& spec);

// CheckAllowedRoots, then loads every distinct dataset once (pipelines with
// the same dataset share the index) and returns the finished, validated
// pipelines in config order. A dataset that is missing or unreadable is
// InvalidArgument naming its field. A pipeline with cache_output takes over
// the output cache of the pipeline of its name in `running` (a reload: the
// pipelines served now) when that one has a cache of the same
// cache_output_bytes, so a reload keeps what is cached (its keys hold the
// transform and the files' identities: nothing stale is ever served);
// otherwise it gets a new, empty one.
absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> LoadPipelines(
    const DaemonConfig& config,
    const std::vector<std::shared_ptr<const PipelineConfig>>& running = {});

}  // namespace conveyor::server
