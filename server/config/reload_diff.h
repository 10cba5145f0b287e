// What a config reload (SIGHUP) may change, decided by comparing the
// running config with the file as it reads now — pure functions, no file
// system, no daemon. A reload is all or nothing: it applies the new file's
// pipelines only when every other setting is the same as the running ones
// (ChangedRestartFields is empty); otherwise nothing changes and the
// daemon says which fields need a restart. config/README.md ("Reloading
// the config") is the user's side of it.
//
// Thread-safety: plain values and free functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "server/config/config.h"

namespace conveyor::server {

// The config fields (as named in the YAML file, e.g. "memory_budget",
// "listen.tcp", "engine.fetch_concurrency") whose values differ between
// `running` and `next` and that a running daemon cannot change: every
// daemon-wide field except allowed_roots (which only judges the datasets
// being loaded), log_level (applied live) and access (the tokens, their
// files read again, applied live — unless one of the two has tokens and the
// other none: "access.tokens"). Empty when the two differ at most in those
// and their pipelines. When a field is added to DaemonConfig, it must be
// compared here (or documented as applied live).
std::vector<std::string> ChangedRestartFields(const DaemonConfig& running,
                                              const DaemonConfig& next);

// How the pipelines of `next` relate to those of `running`, by name, each
// list in `next`'s (added, changed, unchanged) or `running`'s (removed)
// order. "changed": the definition in the file differs (dataset spec,
// transform, limits, policies).
struct PipelineChanges {
  std::vector<std::string> added, removed, changed, unchanged;
};
PipelineChanges ComparePipelines(const DaemonConfig& running, const DaemonConfig& next);

// Whether two pipeline entries of a config define the same pipeline.
bool SamePipelineDefinition(const PipelineSpec& a, const PipelineSpec& b);

}  // namespace conveyor::server
