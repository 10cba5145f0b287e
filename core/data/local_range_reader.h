// LocalRangeReader: the ByteRangeReader (core/data/byte_range_reader.h) of local
// files, over pread. Objects are file paths; each call opens the file
// (O_NONBLOCK, so a FIFO or device never blocks a worker), checks with fstat
// that it is a regular file, reads, and closes (RAII). Prefetch is ignored:
// the page cache and the kernel's read-ahead serve local files.
//
// Errors name the path. Every errno goes through PosixError (core/
// posix_error.h): EMFILE, EIO, ENOMEM... carry its system mark and are
// retried by the engine; ENOENT, EACCES... are errors of the sample. Not a
// regular file is InvalidArgument; a range past the end of the file is
// OutOfRange naming the file, the range and its size (never a short buffer).
//
// Thread-safety: stateless; every method is safe to call concurrently.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/data/byte_range_reader.h"

namespace conveyor {

class LocalRangeReader final : public ByteRangeReader {
 public:
  absl::StatusOr<uint64_t> Size(std::string_view path) const override;
  absl::Status ReadRange(std::string_view path, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override;
};

}  // namespace conveyor
