// FdServer: the fd hand-over socket next to the gRPC unix socket
// ("<socket>.fd"). A client of a SHARED_MEMORY stream connects, sends the
// 8-byte little-endian stream id then the 32-byte secret from StreamOpened,
// and reads one status byte: 0 with the stream's region memfd attached as
// SCM_RIGHTS ancillary data, or 1 (unknown stream or wrong secret, no fd).
// The server then closes the connection. It is a SOCK_STREAM socket, so a
// client may send the 40 bytes in one write or several.
//
// One thread serves the socket, one connection at a time (each is a few
// syscalls; a client that stalls is dropped after a 2 s timeout). The thread
// polls the listening socket and an eventfd, so Stop() ends it promptly.
//
// Thread-safety: Stop() and the destructor may be called from any thread;
// `lookup` is called from the server's thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "core/unique_fd.h"
#include "server/service.h"

namespace conveyor::server {

class FdServer {
 public:
  // Returns the fd to hand over (the server closes its copy after sending),
  // or an error (the client gets status byte 1).
  using Lookup = std::function<absl::StatusOr<UniqueFd>(uint64_t stream_id, const Secret& secret)>;

  // Binds `path` (which PrepareUnixSocketPath made ready) with permissions
  // `mode` and starts serving.
  static absl::StatusOr<std::unique_ptr<FdServer>> Start(const std::string& path, mode_t mode,
                                                         Lookup lookup);
  ~FdServer();  // Stop()
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  // Stops the thread, closes the socket and removes its file. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }

 private:
  FdServer(std::string path, UniqueFd listen_fd, UniqueFd stop_fd, Lookup lookup);
  void Run();
  void Serve(int conn);

  const std::string path_;
  const UniqueFd listen_fd_;
  const UniqueFd stop_fd_;  // eventfd; readable once Stop() was called
  const Lookup lookup_;
  std::thread thread_;
};

}  // namespace conveyor::server
