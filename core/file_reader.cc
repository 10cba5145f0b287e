#include "core/file_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/posix_error.h"
#include "core/unique_fd.h"

namespace conveyor {

absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return PosixError(absl::StrCat("fstat ", path), errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: file of %d bytes exceeds the %d-byte limit (max_file_bytes)", path, size, max_bytes));
  }
  out->resize(size);  // capacity is kept between calls: no churn once grown
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd.get(), out->data() + done, size - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("read ", path), errno);
    }
    if (n == 0) break;  // file shrank while reading
    done += static_cast<uint64_t>(n);
  }
  out->resize(done);
  return absl::OkStatus();
}

}  // namespace conveyor
