// The per-host figures of the daemon's remote readers in GetStats
// (GetStatsResponse.remote_hosts): the readers of the pipelines' URL
// datasets and remote tar shards, each counted once, merged by host.
//
// Thread-safety: a pure function over its arguments (the readers' figures
// are read through their own locks).
#pragma once

#include <memory>
#include <vector>

#include "conveyor/v1/conveyor.pb.h"
#include "core/engine/pipeline_config.h"

namespace conveyor::server {

// Appends one RemoteHostStats per host read by `pipelines`' remote readers
// (none when no pipeline reads remotely).
void AppendRemoteHostStats(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
                           v1::GetStatsResponse* out);

// Sets out->object_cache from the object cache `pipelines`' URL sources,
// re-laid JPEGs and output caches use (left unset when none does; the figures of several folders,
// after a reload that changed cache.dir, are summed under the newest's dir).
void SetObjectCacheStats(const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
                         v1::GetStatsResponse* out);

}  // namespace conveyor::server
