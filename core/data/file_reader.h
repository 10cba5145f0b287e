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
// The reads themselves go through a FileReader (below): PreadFileReader in
// production; tests pass a wrapper that injects read errors, short counts,
// early ends and slow reads (tests/support/fault_injecting_reader.h). There
// is no process-wide hook: a reader is passed where the reads happen.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"

namespace conveyor {

// How the whole-file readers read an open regular file: the seam under
// their read loop (short counts, EINTR, a file that shrinks are the loop's
// to handle, whatever the reader answers). For each file read, BeginRead
// once after open and fstat, then Pread until the file is read or fails,
// then EndRead before the fd is closed, all on the reading thread; the fd
// is open (so unique in the process) from BeginRead to EndRead.
//
// Thread-safety: implementations are called concurrently from every thread
// that reads files and must be safe for concurrent use.
class FileReader {
 public:
  virtual ~FileReader() = default;
  // A read of `fd`, a regular file named `shown` ("<dataset root>/<relative
  // path>" or the path given), begins.
  virtual void BeginRead(int /*fd*/, std::string_view /*shown*/) const {}
  // As pread(2): bytes read, 0 at the end of the file, -1 with errno set.
  virtual ssize_t Pread(int fd, void* buf, size_t count, off_t offset) const = 0;
  // The read of `fd` ended, whether it succeeded or not.
  virtual void EndRead(int /*fd*/) const {}
};

// Production: pread(2), nothing else.
class PreadFileReader final : public FileReader {
 public:
  ssize_t Pread(int fd, void* buf, size_t count, off_t offset) const override;
};

// The process's PreadFileReader (stateless; lives for the process).
const FileReader& DefaultFileReader();

// Errors: PosixError for open/fstat/pread failures; InvalidArgument when the
// path is not a regular file (never blocks on one); ResourceExhausted (not a
// system error) when it is larger than max_bytes, refused before reading;
// DataLoss (an error of the file) when it ends before the size fstat gave,
// i.e. it was truncated or rewritten while being read (never a silent short
// buffer). On error *out is empty and no larger than it was before the call
// (what it grew by for this file is freed), so a buffer kept between samples
// grows only through reads that succeeded.
// The reads go through `reader`.
absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out,
                           const FileReader& reader = DefaultFileReader());

// Like ReadWholeFile for `relative_path` (no leading '/', no ".." component:
// DatasetIndex's rules) below the directory `dir_fd`, without following any
// symbolic link on the way: neither the file nor any folder between dir_fd
// and it may be a link, so nothing leads outside the directory, even when a
// file is swapped for a link after the dataset was indexed. Uses openat2
// (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, one call); where the kernel lacks
// it (ENOSYS), opens folder by folder with O_NOFOLLOW. A link met is
// PermissionDenied "<relative_path>: symbolic link refused ...", an error of
// the sample. Errors name `relative_path` alone, never the server's folders
// (they reach clients in failure reasons); `shown_root` names the file for
// `reader` (BeginRead gets "<shown_root>/<relative_path>").
absl::Status ReadFileBeneath(int dir_fd, std::string_view shown_root,
                             std::string_view relative_path, uint64_t max_bytes,
                             std::vector<uint8_t>* out,
                             const FileReader& reader = DefaultFileReader());

// The open step of ReadFileBeneath, for files held open (tar shards): opens
// `relative_path` below `dir_fd` read-only, without blocking and without
// following any symbolic link on the way. Errors name the file as
// "<shown_root>/<relative_path>" (just the relative path when shown_root is
// empty): a link is PermissionDenied "...: symbolic link refused ...", a
// way out ("..") PermissionDenied, others the errno's (PosixError). The
// caller checks the type (fstat): a FIFO or device is opened, not refused,
// here.
absl::StatusOr<UniqueFd> OpenFileBeneath(int dir_fd, std::string_view shown_root,
                                         std::string_view relative_path);

// "regular file", "directory", "symbolic link", "FIFO", "socket",
// "character device", "block device" or "unknown type" for st_mode.
const char* FileTypeName(mode_t mode);

// For tests: makes ReadFileBeneath take its fallback (folder by folder with
// O_NOFOLLOW) as on a kernel without openat2 (`missing` true), or try openat2
// again (false). Not for concurrent use with reads.
void SetOpenat2MissingForTesting(bool missing);

}  // namespace conveyor
