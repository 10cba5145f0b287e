// Checks of single config values whose rules are the daemon's (addresses,
// socket paths and modes, names, log settings): pure text checks, shared by
// the section parsers (server/config/*_section.cc) and by
// ValidateDaemonFields, which runs them again after command-line overrides.
// Each returns InvalidArgument with the reason only; the caller names the
// field.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace conveyor::server {

// A pipeline or token name: 1-128 letters, digits, '-', '_' or '.', starting
// with a letter or digit.
bool ValidPipelineName(const std::string& name);

// listen.unix_mode: an octal mode ("0660", "0o660") within 0777 that lets the
// owner read and write and grants nothing to others.
absl::Status ParseUnixMode(const std::string& text, mode_t* out);

// listen.tcp, listen.data_tcp: "host:port" (port 0-65535).
absl::Status ValidateTcpAddress(const std::string& addr);

// metrics.listen: an IP literal and a port, as civetweb binds it (no host
// names: nothing is resolved while parsing).
absl::Status ValidateMetricsAddress(const std::string& addr);

// log_format: "text" or "json".
absl::Status ValidateLogFormat(const std::string& format);

// listen.unix: short enough for sun_path, with room for the ".fd" sibling.
absl::Status ValidateUnixPath(const std::string& path);

}  // namespace conveyor::server
