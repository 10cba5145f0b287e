#include "server/transport/fd_server.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "server/access/unix_socket.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

FdServer::FdServer(std::string path, UniqueFd epoll_fd, UniqueFd stop_fd, Lookup lookup)
    : path_(std::move(path)),
      epoll_fd_(std::move(epoll_fd)),
      stop_fd_(std::move(stop_fd)),
      lookup_(std::move(lookup)) {}

absl::StatusOr<std::unique_ptr<FdServer>> FdServer::Start(const std::string& path, mode_t mode,
                                                          Lookup lookup) {
  absl::StatusOr<UniqueFd> listening = ListenUnixSocket(path, mode, 64);
  if (!listening.ok()) return listening.status();
  UniqueFd fd = *std::move(listening);
  // From here on the file is ours: removed again on any failure.
  auto fail = [&path](absl::Status st) {
    ::unlink(path.c_str());
    return st;
  };
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail(PosixError("fd socket: eventfd", errno));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return fail(PosixError("fd socket: epoll_create1", errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = EventKey(EventTag::kWake, 0);
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, stop.get(), &ev) != 0) {
    return fail(PosixError("fd socket: epoll_ctl ADD", errno));
  }
  std::unique_ptr<FdServer> server(
      new FdServer(path, std::move(epoll), std::move(stop), std::move(lookup)));
  FdServer* s = server.get();
  absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> acceptor = HandshakeAcceptor::Create(
      s->epoll_fd_.get(), std::move(fd), HandshakeAcceptor::Options{.name = "fd hand-over"},
      [s](UniqueFd conn, SslPtr /*tls: never set*/, const HandshakeRequest& request) {
        s->Serve(std::move(conn), request);
      });
  if (!acceptor.ok()) return fail(acceptor.status());
  s->acceptor_ = *std::move(acceptor);
  s->thread_ = std::thread([s] { s->Run(); });
  pthread_setname_np(s->thread_.native_handle(), "conveyor-fd");
  return server;
}

FdServer::~FdServer() { Stop(); }

void FdServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof(one)) < 0) {
    // Not expected (the counter cannot overflow with one write): the
    // thread would never end, so say why before waiting for it.
    spdlog::error("fd server: {}", std::string(PosixError("cannot signal stop", errno).message()));
  }
  thread_.join();
  acceptor_.reset();  // closes the socket and the connections not served
  RemoveSocketFile(path_);
}

void FdServer::Run() {
  using Clock = HandshakeAcceptor::Clock;
  epoll_event events[32];
  int timeout_ms = -1;
  while (true) {
    const int n = ::epoll_wait(epoll_fd_.get(), events, 32, timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("fd server: {}; the fd hand-over socket stops serving",
                    std::string(PosixError("epoll_wait", errno).message()));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t key = events[i].data.u64;
      if (TagOf(key) == EventTag::kWake) return;  // Stop()
      if (HandshakeAcceptor::Owns(key)) acceptor_->OnEvent(key);
    }
    const Clock::time_point now = Clock::now();
    const std::optional<Clock::time_point> next = acceptor_->Tick(now);
    timeout_ms = -1;
    if (next) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60'000));
    }
  }
}

void FdServer::Serve(UniqueFd conn, const HandshakeRequest& request) {
  absl::StatusOr<UnixPeer> peer = ReadUnixPeer(conn.get());
  absl::StatusOr<UniqueFd> fd =
      peer.ok() ? lookup_(request.stream_id, request.secret, *peer) : peer.status();
  // An error of the system (out of fds for the duplicate) is no refusal:
  // the client is told to retry.
  uint8_t status = fd.ok()                      ? kHandshakeAccepted
                         : IsSystemError(fd.status()) ? kHandshakeBusy
                                                      : kHandshakeRefused;
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
  // A fresh connection's send buffer is empty: one byte and its fd fit, so
  // this does not block (and must not: the thread serves everyone).
  ssize_t sent;
  do {
    sent = ::sendmsg(conn.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (sent < 0 && errno == EINTR);
  const int send_errno = errno;
  if (!fd.ok()) {
    spdlog::warn("fd hand-over {}: stream {} from {}: {}",
                 status == kHandshakeBusy ? "deferred (client told to retry)" : "refused",
                 request.stream_id, PeerName(conn.get()), std::string(fd.status().message()));
  } else if (sent != 1) {
    spdlog::warn("fd hand-over of stream {} to {} failed: {}", request.stream_id,
                 PeerName(conn.get()), std::string(PosixError("sendmsg", send_errno).message()));
  } else {
    spdlog::debug("fd hand-over: stream {} region sent to {}", request.stream_id,
                  PeerName(conn.get()));
  }
}  // our copies of the fd and the connection close here

}  // namespace conveyor::server
