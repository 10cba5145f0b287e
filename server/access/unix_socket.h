// Helpers for the daemon's unix socket files: getting a path ready to bind
// (parent folders, stale sockets) and removing it again on the way out.
// Thread-safety: free functions without shared state (they touch the file
// system, so two daemons racing on one path are told apart by connect()).
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"

namespace conveyor::server {

// Makes `path` ready for bind(): creates missing parent folders (mode 0750),
// removes a socket left behind by a daemon that is gone (nothing accepts on
// it), and refuses with AlreadyExists when a live daemon listens there or
// FailedPrecondition when something other than a socket is in the way.
absl::Status PrepareUnixSocketPath(const std::string& path);

// Creates a listening unix socket (non-blocking, close-on-exec) bound to
// `path` (which PrepareUnixSocketPath made ready) with exactly the
// permissions `mode`: the file is owner-only while bind() creates it, so it
// is never looser than `mode`, even for an instant. On failure the file is
// removed again. The caller removes it when done (RemoveSocketFile).
absl::StatusOr<UniqueFd> ListenUnixSocket(const std::string& path, mode_t mode, int backlog);

// Removes `path` if it is a socket (never another kind of file).
void RemoveSocketFile(const std::string& path);

// Sets the process umask to `mask` for the life of the object and restores
// the old one after. The umask is process-wide: used only around bind() at
// start-up so that a socket is never created with looser permissions than
// `mode` asks for, even for an instant.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask);
  ~ScopedUmask();
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  mode_t old_;
};

}  // namespace conveyor::server
