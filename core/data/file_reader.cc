#include "core/data/file_reader.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"

namespace conveyor {
namespace {

// Flags of every sample open: O_NONBLOCK so that a FIFO (or a device) cannot
// block the open; regular files ignore it.
constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

// Debian's abseil has its own string_view type (not std::string_view).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Shown(std::string_view root, std::string_view rel) {
  if (root.empty()) return std::string(rel);
  if (root.back() == '/') return absl::StrCat(Sv(root), Sv(rel));
  return absl::StrCat(Sv(root), "/", Sv(rel));
}

absl::Status LinkRefused(const std::string& shown) {
  return absl::PermissionDeniedError(absl::StrCat(
      shown, ": symbolic link refused (links below the dataset root are not followed)"));
}

// fstat, the regular-file check, the size limit and the read, on an open fd.
// Errors name `shown`; the reader's BeginRead gets `seam_name`.
absl::Status ReadOpenFile(int fd, const std::string& shown, const std::string& seam_name,
                          uint64_t max_bytes, std::vector<uint8_t>* out, const FileReader& reader) {
  struct stat st;
  if (fstat(fd, &st) != 0) return PosixError(absl::StrCat("fstat ", shown), errno);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(shown, ": not a regular file (", FileTypeName(st.st_mode), ")"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: file of %d bytes exceeds the %d-byte limit (max_file_bytes)", shown, size, max_bytes));
  }
  reader.BeginRead(fd, seam_name);
  struct Ended {  // EndRead on every way out
    const FileReader& reader;
    int fd;
    ~Ended() { reader.EndRead(fd); }
  } ended{reader, fd};
  const size_t kept = out->capacity();
  // A failed read gives back what it grew the buffer by: callers keep
  // buffers between samples and bound them only after a successful read.
  auto failed = [out, kept](absl::Status s) {
    if (out->capacity() > kept) std::vector<uint8_t>().swap(*out);
    out->clear();
    return s;
  };
  out->resize(size);  // capacity is kept between calls: no churn once grown
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = reader.Pread(fd, out->data() + done, size - done, static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return failed(PosixError(absl::StrCat("read ", shown), errno));
    }
    if (n == 0) {  // the file shrank (was truncated or rewritten) while being read
      return failed(absl::DataLossError(absl::StrFormat(
          "read %s: file changed size while being read (got %d of %d bytes)", shown, done, size)));
    }
    done += static_cast<uint64_t>(n);
  }
  out->resize(done);
  return absl::OkStatus();
}

// openat2 is tried until the kernel says it lacks it (ENOSYS, also what
// seccomp filters of some container runtimes answer for unknown calls).
std::atomic<bool> g_openat2_missing{false};

// Opens folder by folder with O_NOFOLLOW (the fallback of OpenBeneath).
// Returns the fd, or -1 with errno set; *link is set when a component is a
// symbolic link.
int OpenByComponents(int dir_fd, const std::string& rel, bool* link) {
  UniqueFd held;  // the folder opened last (dir_fd itself is borrowed)
  int at = dir_fd;
  size_t start = 0;
  for (;;) {
    const size_t slash = rel.find('/', start);
    const std::string name =
        rel.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    const bool last = slash == std::string::npos;
    if (name == "..") {  // a way out of the root, refused as RESOLVE_BENEATH does
      errno = EXDEV;
      return -1;
    }
    if (name.empty() || name == ".") {  // "a//b", "./a": nothing to open
      if (last) {
        errno = EISDIR;
        return -1;
      }
      start = slash + 1;
      continue;
    }
    const int flags =
        last ? kOpenFlags | O_NOFOLLOW : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    const int fd = ::openat(at, name.c_str(), flags);
    if (fd < 0) {
      const int err = errno;
      struct stat st;
      if ((err == ELOOP || err == ENOTDIR) &&
          ::fstatat(at, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
        *link = true;
      }
      errno = err;
      return -1;
    }
    if (last) return fd;
    held.Reset(fd);
    at = fd;
    start = slash + 1;
  }
}

}  // namespace

ssize_t PreadFileReader::Pread(int fd, void* buf, size_t count, off_t offset) const {
  return ::pread(fd, buf, count, offset);
}

const FileReader& DefaultFileReader() {
  // Never destroyed: threads may still read while the process exits.
  static const PreadFileReader* const reader = new PreadFileReader();
  return *reader;
}

const char* FileTypeName(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "regular file";
    case S_IFDIR: return "directory";
    case S_IFLNK: return "symbolic link";
    case S_IFIFO: return "FIFO";
    case S_IFSOCK: return "socket";
    case S_IFCHR: return "character device";
    case S_IFBLK: return "block device";
    default: return "unknown type";
  }
}

void SetOpenat2MissingForTesting(bool missing) {
  g_openat2_missing.store(missing, std::memory_order_relaxed);
}

absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out,
                           const FileReader& reader) {
  UniqueFd fd(::open(path.c_str(), kOpenFlags));
  if (!fd) return PosixError(absl::StrCat("open ", path), errno);
  return ReadOpenFile(fd.get(), path, path, max_bytes, out, reader);
}

absl::StatusOr<UniqueFd> OpenFileBeneath(int dir_fd, std::string_view shown_root,
                                         std::string_view relative_path) {
  const std::string rel(relative_path);  // NUL-terminated for the kernel
  int fd = -1;
  bool link = false;
  int err = 0;
#ifdef SYS_openat2
  if (!g_openat2_missing.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = kOpenFlags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    // EAGAIN: a rename raced the walk (the kernel asks for a retry).
    for (int attempt = 0; attempt < 8; ++attempt) {
      fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, rel.c_str(), &how, sizeof(how)));
      if (fd >= 0 || (errno != EAGAIN && errno != EINTR)) break;
    }
    err = errno;
    if (fd < 0 && err == ENOSYS) g_openat2_missing.store(true, std::memory_order_relaxed);
    // RESOLVE_NO_SYMLINKS answers ELOOP for a link anywhere on the way,
    // RESOLVE_BENEATH EXDEV for a way out ("..").
    if (fd < 0 && err == ELOOP) link = true;
  }
  if (g_openat2_missing.load(std::memory_order_relaxed))
#endif
  {
    fd = OpenByComponents(dir_fd, rel, &link);
    err = errno;
  }
  if (fd < 0) {
    const std::string shown = Shown(shown_root, relative_path);
    if (link) return LinkRefused(shown);
    if (err == EXDEV) {
      return absl::PermissionDeniedError(
          absl::StrCat(shown, ": leads outside the dataset root (\"..\")"));
    }
    return PosixError(absl::StrCat("open ", shown), err);
  }
  return UniqueFd(fd);
}

absl::Status ReadFileBeneath(int dir_fd, std::string_view shown_root,
                             std::string_view relative_path, uint64_t max_bytes,
                             std::vector<uint8_t>* out, const FileReader& reader) {
  // Errors name the relative path alone: they reach clients.
  absl::StatusOr<UniqueFd> fd = OpenFileBeneath(dir_fd, "", relative_path);
  if (!fd.ok()) return fd.status();
  return ReadOpenFile(fd->get(), std::string(relative_path), Shown(shown_root, relative_path),
                      max_bytes, out, reader);
}

}  // namespace conveyor
