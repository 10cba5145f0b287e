#include "server/access/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"

namespace conveyor::server {

namespace fs = std::filesystem;

ScopedUmask::ScopedUmask(mode_t mask) : old_(::umask(mask)) {}
ScopedUmask::~ScopedUmask() { ::umask(old_); }

absl::Status PrepareUnixSocketPath(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad unix socket path '", path, "'"));
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    // Create missing folders one by one so each gets 0750 (not the umask's).
    fs::path p;
    for (const auto& part : parent) {
      p /= part;
      struct stat st {};
      if (::stat(p.c_str(), &st) == 0) continue;
      if (::mkdir(p.c_str(), 0750) != 0 && errno != EEXIST) {
        return PosixError(absl::StrCat("cannot create folder ", p.string(), " for ", path), errno);
      }
      ::chmod(p.c_str(), 0750);
    }
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return PosixError(absl::StrCat("cannot stat ", path), errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
  }
  // A socket: is anyone listening?
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError("socket", errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("another process listens on ", path, " (is conveyord already running?)"));
  }
  if (errno != ECONNREFUSED && errno != ENOENT) {
    return PosixError(absl::StrCat("cannot tell whether ", path, " is in use"), errno);
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return PosixError(absl::StrCat("cannot remove stale socket ", path), errno);
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> ListenUnixSocket(const std::string& path, mode_t mode, int backlog) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("bad unix socket path '", path, "'"));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return PosixError(absl::StrCat("socket for ", path), errno);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  {
    ScopedUmask umask(0177);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return PosixError(absl::StrCat("bind ", path), errno);
    }
  }
  // From here on the file is ours: removed again on any failure.
  auto fail = [&path](absl::Status st) {
    ::unlink(path.c_str());
    return st;
  };
  if (::chmod(path.c_str(), mode) != 0) {
    return fail(PosixError(absl::StrCat("chmod ", path), errno));
  }
  if (::listen(fd.get(), backlog) != 0) {
    return fail(PosixError(absl::StrCat("listen ", path), errno));
  }
  return fd;
}

void RemoveSocketFile(const std::string& path) {
  struct stat st {};
  if (!path.empty() && ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
    ::unlink(path.c_str());
  }
}

}  // namespace conveyor::server
