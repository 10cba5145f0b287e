#include "server/fd_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/unix_socket.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {
constexpr size_t kRequestBytes = 8 + kSecretBytes;
constexpr uint8_t kStatusOk = 0;
constexpr uint8_t kStatusRefused = 1;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}
}  // namespace

FdServer::FdServer(std::string path, UniqueFd listen_fd, UniqueFd stop_fd, Lookup lookup)
    : path_(std::move(path)),
      listen_fd_(std::move(listen_fd)),
      stop_fd_(std::move(stop_fd)),
      lookup_(std::move(lookup)) {}

absl::StatusOr<std::unique_ptr<FdServer>> FdServer::Start(const std::string& path, mode_t mode,
                                                          Lookup lookup) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("fd socket path too long: ", path));
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Errno("socket");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  {
    // Owner-only while bind() creates the file; then exactly `mode`.
    ScopedUmask umask(0177);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return Errno(absl::StrCat("bind ", path));
    }
  }
  if (::chmod(path.c_str(), mode) != 0) {
    absl::Status st = Errno(absl::StrCat("chmod ", path));
    ::unlink(path.c_str());
    return st;
  }
  if (::listen(fd.get(), 64) != 0) {
    absl::Status st = Errno(absl::StrCat("listen ", path));
    ::unlink(path.c_str());
    return st;
  }
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) {
    ::unlink(path.c_str());
    return Errno("eventfd");
  }
  std::unique_ptr<FdServer> server(
      new FdServer(path, std::move(fd), std::move(stop), std::move(lookup)));
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

FdServer::~FdServer() { Stop(); }

void FdServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof(one)) < 0) {
    spdlog::error("fd server: cannot signal stop: {}", strerror(errno));
  }
  thread_.join();
  RemoveSocketFile(path_);
}

void FdServer::Run() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("fd server: poll: {}", strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        spdlog::warn("fd server: accept: {}", strerror(errno));
      }
      continue;
    }
    Serve(conn.get());
  }  // conn closes here, after the reply
}

void FdServer::Serve(int conn) {
  // Connections are served one at a time: a client that connects and sends
  // nothing may hold the others up only briefly (a real client sends its
  // 40 bytes right after connecting).
  const timeval timeout{0, 250 * 1000};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  ucred cred{};
  socklen_t cred_len = sizeof(cred);
  ::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len);

  uint8_t req[kRequestBytes];
  size_t got = 0;
  while (got < kRequestBytes) {
    const ssize_t r = ::recv(conn, req + got, kRequestBytes - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      spdlog::warn("fd hand-over: pid {} sent {} of {} request bytes; dropped", cred.pid, got,
                   kRequestBytes);
      return;
    }
    got += static_cast<size_t>(r);
  }
  const uint64_t stream_id = DecodeStreamId(req);
  Secret secret;
  std::memcpy(secret.data(), req + 8, kSecretBytes);

  absl::StatusOr<UniqueFd> fd = lookup_(stream_id, secret);
  uint8_t status = fd.ok() ? kStatusOk : kStatusRefused;
  iovec iov{&status, 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd.ok()) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    const int raw = fd->get();
    std::memcpy(CMSG_DATA(cm), &raw, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(conn, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (!fd.ok()) {
    spdlog::warn("fd hand-over refused: stream {} from pid {} uid {}: {}", stream_id, cred.pid,
                 cred.uid, fd.status().ToString());
  } else if (sent != 1) {
    spdlog::warn("fd hand-over of stream {} to pid {} failed: {}", stream_id, cred.pid,
                 strerror(errno));
  } else {
    spdlog::debug("fd hand-over: stream {} region sent to pid {} uid {}", stream_id, cred.pid,
                  cred.uid);
  }
}  // our copy of the fd closes here

}  // namespace conveyor::server
