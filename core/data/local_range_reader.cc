#include "core/data/local_range_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "core/data/file_reader.h"

namespace conveyor {
namespace {

// Opens `path` without blocking and checks that it is a regular file;
// *size receives its size.
absl::Status OpenRegular(const std::string& path, UniqueFd* fd, uint64_t* size) {
  fd->Reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!*fd) return PosixError(absl::StrCat("open ", path), errno);
  struct stat st;
  if (fstat(fd->get(), &st) != 0) return PosixError(absl::StrCat("fstat ", path), errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file (", FileTypeName(st.st_mode), ")"));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<uint64_t> LocalRangeReader::Size(std::string_view path) const {
  UniqueFd fd;
  uint64_t size = 0;
  if (absl::Status s = OpenRegular(std::string(path), &fd, &size); !s.ok()) return s;
  return size;
}

absl::Status LocalRangeReader::ReadRange(std::string_view path_view, uint64_t offset,
                                         uint64_t length, std::vector<uint8_t>* out) const {
  const std::string path(path_view);
  UniqueFd fd;
  uint64_t size = 0;
  if (absl::Status s = OpenRegular(path, &fd, &size); !s.ok()) return s;
  if (offset > size || length > size - offset) {
    return absl::OutOfRangeError(absl::StrFormat("%s: bytes [%d, %d) asked of a file of %d bytes",
                                                 path, offset, offset + length, size));
  }
  out->resize(length);  // capacity is kept between calls
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(fd.get(), out->data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("read ", path), errno);
    }
    if (n == 0) {  // the file shrank after fstat
      return absl::OutOfRangeError(
          absl::StrFormat("%s: file ended at byte %d, inside bytes [%d, %d) (changed while read?)",
                          path, offset + done, offset, offset + length));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace conveyor
