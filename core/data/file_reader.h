// The primitives of FileSampleSource (the Fetch stage's default): read a
// file whole into a caller-owned buffer whose capacity is reused across calls
// (no per-sample allocation once buffers have grown to the largest file).
// Thread-safe; fds are owned by RAII inside the calls. The only state is a
// process-wide atomic flag remembering that the kernel lacks openat2.
//
// Hostile files: every open uses O_NONBLOCK and is followed by fstat, so a
// FIFO, socket or device never blocks a worker; anything that is not a
// regular file is refused, naming its type ("not a regular file (FIFO)").
// ReadFileBeneath also never follows a symbolic link (see there).
//
// Errors name the path. Every errno goes through PosixError (core/
// posix_error.h), so errors of the system (EMFILE, ENFILE, ENOMEM, EIO,
// EAGAIN, ...) carry its system mark (IsSystemError) and the engine retries
// them; errors of the file (ENOENT, EACCES, ...) and the checks below are the
// sample's.
//
// Tests inject read errors, short counts and slow reads through the seam in
// core/data/read_fault_hook.h (one atomic load per read when unused).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace conveyor {

// Errors: PosixError for open/fstat/pread failures; InvalidArgument when the
// path is not a regular file (never blocks on one); ResourceExhausted (not a
// system error) when it is larger than max_bytes, refused before reading;
// DataLoss (an error of the file) when it ends before the size fstat gave,
// i.e. it was truncated or rewritten while being read (never a silent short
// buffer). On error *out is empty and no larger than it was before the call
// (what it grew by for this file is freed), so a buffer kept between samples
// grows only through reads that succeeded.
absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out);

// Like ReadWholeFile for `relative_path` (no leading '/', no ".." component:
// DatasetIndex's rules) below the directory `dir_fd`, without following any
// symbolic link on the way: neither the file nor any folder between dir_fd
// and it may be a link, so nothing leads outside the directory, even when a
// file is swapped for a link after the dataset was indexed. Uses openat2
// (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, one call); where the kernel lacks
// it (ENOSYS), opens folder by folder with O_NOFOLLOW. A link met is
// PermissionDenied "<shown root>/<relative_path>: symbolic link refused ...",
// an error of the sample. `shown_root` only names the file in errors.
absl::Status ReadFileBeneath(int dir_fd, std::string_view shown_root,
                             std::string_view relative_path, uint64_t max_bytes,
                             std::vector<uint8_t>* out);

// "regular file", "directory", "symbolic link", "FIFO", "socket",
// "character device", "block device" or "unknown type" for st_mode.
const char* FileTypeName(mode_t mode);

// For tests: makes ReadFileBeneath take its fallback (folder by folder with
// O_NOFOLLOW) as on a kernel without openat2 (`missing` true), or try openat2
// again (false). Not for concurrent use with reads.
void SetOpenat2MissingForTesting(bool missing);

}  // namespace conveyor
