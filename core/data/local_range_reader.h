// LocalRangeReader: the ByteRangeReader (core/data/byte_range_reader.h) of
// local tar shards, over pread on files held open. Open opens every shard
// once, at load, and keeps its fd for the reader's life; reads never open a
// path again, so a shard swapped for a symbolic link or renamed over after
// the dataset was indexed is never read: the held fd still reads the file
// that was indexed (its bytes, never another file's under the index's
// labels). Objects are the paths given to Open; any other is NotFound.
// Prefetch is ignored: the page cache and the kernel's read-ahead serve
// local files.
//
// Opening (the rule of sample files, core/data/file_reader.h): the shards'
// common folder (CommonFolder, core/data/tar_dataset.h: the tar dataset's
// root) is opened as a dataset root is — through links, which the config
// check resolved against allowed_roots — and each shard below it with
// OpenFileBeneath: no symbolic link between that folder and the shard, the
// shard itself included, is followed. Each must be a regular file (opened
// without blocking, so a FIFO is refused, never waited on), and no two may
// be the same file (device and inode: a hard link, a bind mount).
//
// Cost: one fd per shard for the reader's life. Open refuses more shards
// than `max_open_files` (default: half the process's soft RLIMIT_NOFILE,
// leaving the rest to connections and sample reads), naming both numbers.
//
// Errors of Open name the absolute paths (they reach the operator at load).
// Errors of reads name the shard by its path below the common folder, as
// the tar dataset's sample paths do, never the server's absolute path (they
// reach clients in failure reasons). Every errno goes through PosixError
// (core/base/posix_error.h): EIO, ENOMEM... carry its system mark and are
// retried by the engine. A range past the end of the file (as it was at
// Open, or as it is now when it was cut since) is OutOfRange naming the
// shard, the range and its size (never a short buffer).
//
// Thread-safety: immutable after Open; every method is safe to call
// concurrently (pread on shared fds).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"
#include "core/data/byte_range_reader.h"

namespace conveyor {

class LocalRangeReader final : public ByteRangeReader {
 public:
  // Opens each of `paths` (absolute, distinct) as above. `max_open_files`
  // 0: DefaultMaxOpenFiles(). With `allowed_roots` (absolute, symbolic
  // links resolved, normalised): each shard as opened — the common folder's
  // real path (/proc/self/fd) and the shard's path below it, where no link
  // was followed — must lie under one of them, else PermissionDenied naming
  // the shard and where it really is. The config check judged the paths
  // before; this judges the files opened, so a folder swapped for a link in
  // between cannot lead outside.
  static absl::StatusOr<std::shared_ptr<const LocalRangeReader>> Open(
      const std::vector<std::string>& paths, uint64_t max_open_files = 0,
      const std::vector<std::string>& allowed_roots = {});

  // Half the process's soft RLIMIT_NOFILE (at least 1).
  static uint64_t DefaultMaxOpenFiles();

  absl::StatusOr<uint64_t> Size(std::string_view path) const override;
  absl::Status ReadRange(std::string_view path, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override;

 private:
  struct File {
    UniqueFd fd;
    uint64_t size = 0;  // at Open
    std::string shown;  // the path below the common folder, for messages
  };
  LocalRangeReader() = default;

  // Constant after Open: path as given -> its open file.
  std::unordered_map<std::string, File> files_;
};

}  // namespace conveyor
