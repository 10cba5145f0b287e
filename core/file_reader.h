// ReadWholeFile: the primitive of FileSampleSource (the Fetch stage's
// default). Reads a file whole into a caller-owned buffer whose capacity is
// reused across calls (no per-sample allocation once buffers have grown to
// the largest file). Stateless and thread-safe; the fd is owned by RAII
// inside the call.
//
// Errors name the path. Every errno goes through PosixError (core/
// posix_error.h), so errors of the system (EMFILE, ENFILE, ENOMEM, EIO,
// EAGAIN, ...) carry its system mark (IsSystemError) and the engine retries
// them; errors of the file (ENOENT, EACCES, ELOOP, ...) and the checks below
// are the sample's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace conveyor {

// Errors: PosixError for open/fstat/pread failures; InvalidArgument when the
// path is not a regular file; ResourceExhausted (not a system error) when it
// is larger than max_bytes, refused before reading.
absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out);

}  // namespace conveyor
