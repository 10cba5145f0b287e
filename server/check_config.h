// `conveyord --check-config --no-data`: the schema-only check of a config
// file, for a host without the data (a CI job, an image build). The file is
// parsed and every field's name, type and value validated exactly as at
// start (ParseConfig, then the command line's overrides: ApplyFlags), but
// nothing it names is opened: no dataset is indexed, no symlink under
// allowed_roots resolved (the paths as written are still checked against
// it), no token or TLS file read. The full `--check-config` does all of
// that too (server/daemon.h's DaemonMain).
//
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "server/config/config.h"

namespace conveyor::server {

// The line --check-config --no-data prints for a valid `config` (read from
// `file`): the same "FILE: OK: N pipeline(s) on M dataset(s): ..." as the
// full check, with the pipelines' names (their sample counts are unknown
// without the data) and what was not read.
std::string SchemaOnlyCheckReport(const std::string& file, const DaemonConfig& config);

}  // namespace conveyor::server
