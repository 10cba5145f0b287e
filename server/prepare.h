// `conveyord --prepare PIPELINE`: makes the re-laid JPEG copies of a
// relay_jpeg pipeline in the daemon's cache folder before the daemon serves
// (remote/relay_prepare.h), with `threads` workers (0: the CPUs the process
// may use), printing progress and a summary; so epoch 1 is served from
// copies too. The cache folder is one process's at a time: run it before
// the daemon starts (ExecStartPre, an init container), not beside it.
//
// Thread-safety: called once, from main.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/engine/pipeline_config.h"
#include "server/config/config.h"

namespace conveyor::server {

// Exit status: 0 once every sample was looked at (whatever could not be
// re-laid is counted, not fatal); 2 when `name` names no pipeline, one
// without relay_jpeg, or the cache folder is another process's.
int RunPrepare(const DaemonConfig& config,
               const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
               const std::string& name);

}  // namespace conveyor::server
