#include "core/data/local_range_reader.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/text_escape.h"
#include "core/data/file_reader.h"
#include "core/data/tar_dataset.h"

namespace conveyor {
namespace {

bool IsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path.front() == '/';
  return path.compare(0, root.size(), root) == 0 &&
         (path.size() == root.size() || path[root.size()] == '/');
}

// The path the kernel gives for an open fd; empty when /proc is missing.
std::string FdPath(int fd) {
  char buf[4096];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf) || buf[0] != '/') return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

uint64_t LocalRangeReader::DefaultMaxOpenFiles() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1 << 20;
  return std::max<uint64_t>(1, static_cast<uint64_t>(rl.rlim_cur) / 2);
}

absl::StatusOr<std::shared_ptr<const LocalRangeReader>> LocalRangeReader::Open(
    const std::vector<std::string>& paths, uint64_t max_open_files,
    const std::vector<std::string>& allowed_roots) {
  if (max_open_files == 0) max_open_files = DefaultMaxOpenFiles();
  if (paths.size() > max_open_files) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d local shards need one open file each, more than the %d allowed (half the soft limit "
        "of open files, RLIMIT_NOFILE): raise the limit (LimitNOFILE= in the systemd unit, "
        "ulimit -n) or merge shards",
        paths.size(), max_open_files));
  }
  for (const std::string& p : paths) {
    if (p.empty() || p.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("shard path '", EscapeText(p), "' is not absolute"));
    }
  }
  std::shared_ptr<LocalRangeReader> reader(new LocalRangeReader());
  if (paths.empty()) return std::shared_ptr<const LocalRangeReader>(std::move(reader));
  const std::string root = CommonFolder(paths);
  UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) return PosixError(absl::StrCat("open folder ", EscapeText(root)), errno);
  const std::string real_root = allowed_roots.empty() ? "" : FdPath(root_fd.get());
  std::map<std::pair<dev_t, ino_t>, const std::string*> seen;
  for (const std::string& path : paths) {
    const std::string rel = path.substr(root == "/" ? 1 : root.size() + 1);
    if (!real_root.empty()) {
      const std::string real = real_root == "/" ? "/" + rel : absl::StrCat(real_root, "/", rel);
      bool under = false;
      for (const std::string& allowed : allowed_roots) under |= IsUnder(real, allowed);
      if (!under) {
        return absl::PermissionDeniedError(
            absl::StrCat(EscapeText(path), " (really ", EscapeText(real),
                         ", as opened) lies outside the allowed roots"));
      }
    }
    absl::StatusOr<UniqueFd> fd = OpenFileBeneath(root_fd.get(), root, rel);
    if (!fd.ok()) return fd.status();
    struct stat st;
    if (fstat(fd->get(), &st) != 0) {
      return PosixError(absl::StrCat("fstat ", EscapeText(path)), errno);
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(EscapeText(path), ": not a regular file (", FileTypeName(st.st_mode), ")"));
    }
    auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), &path);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s and %s are the same file (device %d, inode %d: a hard link or another path to it); "
          "a shard listed twice would serve its samples twice an epoch",
          EscapeText(*it->second), EscapeText(path), st.st_dev, st.st_ino));
    }
    File f;
    f.fd = *std::move(fd);
    f.size = static_cast<uint64_t>(st.st_size);
    f.shown = EscapeText(rel);
    if (!reader->files_.emplace(path, std::move(f)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard ", EscapeText(path), " is listed twice"));
    }
  }
  return std::shared_ptr<const LocalRangeReader>(std::move(reader));
}

absl::StatusOr<uint64_t> LocalRangeReader::Size(std::string_view path) const {
  const auto it = files_.find(std::string(path));
  if (it == files_.end()) {
    return absl::NotFoundError(
        absl::StrCat(EscapeText(path), ": not a shard opened when the dataset was loaded"));
  }
  return it->second.size;
}

absl::Status LocalRangeReader::ReadRange(std::string_view path, uint64_t offset, uint64_t length,
                                         std::vector<uint8_t>* out) const {
  const auto it = files_.find(std::string(path));
  if (it == files_.end()) {
    return absl::NotFoundError(
        absl::StrCat(EscapeText(path), ": not a shard opened when the dataset was loaded"));
  }
  const File& f = it->second;
  if (offset > f.size || length > f.size - offset) {
    return absl::OutOfRangeError(absl::StrFormat("%s: bytes [%d, %d) asked of a file of %d bytes",
                                                 f.shown, offset, offset + length, f.size));
  }
  out->resize(length);  // capacity is kept between calls
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n =
        ::pread(f.fd.get(), out->data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return PosixError(absl::StrCat("read ", f.shown), errno);
    }
    if (n == 0) {  // the file was cut since it was indexed
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: file ended at byte %d, inside bytes [%d, %d) (cut since it was indexed?)", f.shown,
          offset + done, offset, offset + length));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace conveyor
