#include "server/transport/fd_server.h"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "server/access/unix_socket.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {
constexpr auto kRefusalLogInterval = std::chrono::seconds(10);
}  // namespace

FdServer::FdServer(std::string path, std::unique_ptr<EpollLoop> loop, Lookup lookup)
    : path_(std::move(path)),
      loop_(std::move(loop)),
      lookup_(std::move(lookup)),
      refusal_log_(kRefusalLogInterval) {}

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
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("fd hand-over");
  if (!loop.ok()) return fail(loop.status());
  std::unique_ptr<FdServer> server(new FdServer(path, *std::move(loop), std::move(lookup)));
  FdServer* s = server.get();
  absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> acceptor = HandshakeAcceptor::Create(
      s->loop_.get(), std::move(fd), HandshakeAcceptor::Options{.name = "fd hand-over"},
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
  loop_->Stop();
  thread_.join();
  acceptor_.reset();  // closes the socket and the connections not served
  RemoveSocketFile(path_);
}

void FdServer::Run() {
  const absl::Status st = loop_->Run(
      [this](uint64_t key, uint32_t /*events*/) {
        if (HandshakeAcceptor::Owns(key)) acceptor_->OnEvent(key);
      },
      [this](EpollLoop::Clock::time_point now) {
        LogHeldBackRefusals(now);
        std::optional<EpollLoop::Clock::time_point> next = acceptor_->Tick(now);
        if (std::optional<EpollLoop::Clock::time_point> due = refusal_log_.NextDue()) {
          next = next ? std::min(*next, *due) : *due;
        }
        return next;
      });
  if (!st.ok()) {
    spdlog::error("fd server: {}; the fd hand-over socket stops serving",
                  std::string(st.message()));
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
    // One client can ask thousands of times a second: one line per peer
    // and interval, the rest counted.
    const std::string key =
        peer.ok() ? absl::StrCat("uid ", peer->credentials.uid) : PeerName(conn.get());
    uint64_t held_back = 0;
    if (refusal_log_.Admit(key, EpollLoop::Clock::now(), &held_back)) {
      spdlog::warn("fd hand-over {}: stream {} from {}: {}{}",
                   status == kHandshakeBusy ? "deferred (client told to retry)" : "refused",
                   request.stream_id, PeerName(conn.get()), std::string(fd.status().message()),
                   held_back == 0 ? std::string()
                                  : absl::StrCat(" (and ", held_back, " more from ", key,
                                                 " not logged before this line)"));
    }
  } else if (sent != 1) {
    spdlog::warn("fd hand-over of stream {} to {} failed: {}", request.stream_id,
                 PeerName(conn.get()), std::string(PosixError("sendmsg", send_errno).message()));
  } else {
    spdlog::debug("fd hand-over: stream {} region sent to {}", request.stream_id,
                  PeerName(conn.get()));
  }
}  // our copies of the fd and the connection close here

void FdServer::LogHeldBackRefusals(EpollLoop::Clock::time_point now) {
  for (const auto& [key, count] : refusal_log_.TakeDue(now)) {
    spdlog::warn("fd hand-over: {} more refused or deferred from {} in the last {} s", count, key,
                 std::chrono::duration_cast<std::chrono::seconds>(kRefusalLogInterval).count());
  }
}

}  // namespace conveyor::server
