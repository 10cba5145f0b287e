#include "client/cpp/side_socket.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"

namespace conveyor::client {
namespace {

constexpr uint8_t kAccepted = 0;
constexpr uint8_t kRefused = 1;
constexpr uint8_t kBusy = 2;

absl::Status Unavailable(absl::Status posix) { return absl::UnavailableError(posix.message()); }

absl::Status SetTimeouts(int fd, absl::Duration recv, absl::Duration send) {
  const timeval r = absl::ToTimeval(recv);
  const timeval s = absl::ToTimeval(send);
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof(r)) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof(s)) != 0) {
    return PosixError("setsockopt(SO_RCVTIMEO/SO_SNDTIMEO)", errno);
  }
  return absl::OkStatus();
}

absl::Status SendRequest(int fd, uint64_t stream_id, absl::string_view secret,
                         absl::string_view where) {
  if (secret.size() != kSecretBytes) {
    return absl::InternalError(absl::StrCat("protocol error: the daemon sent a ", secret.size(),
                                            "-byte secret, expected ", kSecretBytes));
  }
  uint8_t request[8 + kSecretBytes];
  for (int i = 0; i < 8; ++i) request[i] = static_cast<uint8_t>(stream_id >> (8 * i));
  std::memcpy(request + 8, secret.data(), kSecretBytes);
  size_t sent = 0;
  while (sent < sizeof(request)) {
    const ssize_t n = ::send(fd, request + sent, sizeof(request) - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return Unavailable(PosixError(absl::StrCat(where, ": sending the handshake"), errno));
    sent += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status CheckStatusByte(int status, absl::string_view where, uint64_t stream_id) {
  if (status == kAccepted) return absl::OkStatus();
  if (status < 0) {
    return absl::UnavailableError(absl::StrCat(where, ": the daemon closed the connection"));
  }
  if (status == kBusy) {
    return absl::UnavailableError(
        absl::StrCat(where, ": the daemon is out of resources (file descriptors); retry"));
  }
  if (status == kRefused) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the daemon refused stream ", stream_id, " (gone, or wrong secret)"));
  }
  return absl::InternalError(absl::StrCat(where, ": unknown status byte ", status));
}

}  // namespace

absl::StatusOr<UniqueFd> ReceiveRegionFd(const std::string& fd_socket, uint64_t stream_id,
                                         absl::string_view secret, absl::Duration timeout) {
  const std::string where = absl::StrCat("fd hand-over on ", fd_socket);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd_socket.empty() || fd_socket.size() >= sizeof(addr.sun_path)) {
    return absl::InternalError(absl::StrCat("protocol error: the daemon's fd socket path \"",
                                            fd_socket, "\" is empty or too long"));
  }
  std::memcpy(addr.sun_path, fd_socket.data(), fd_socket.size());
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock) return PosixError("socket(AF_UNIX)", errno);
  RETURN_IF_ERROR(SetTimeouts(sock.get(), timeout, timeout));
  if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Unavailable(
        PosixError(absl::StrCat("connecting to the daemon's fd socket ", fd_socket), errno));
  }
  RETURN_IF_ERROR(SendRequest(sock.get(), stream_id, secret, where));

  uint8_t status = 0;
  iovec iov{&status, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Unavailable(PosixError(absl::StrCat(where, ": reading the reply"), errno));
  // Whatever fd came along is owned at once, so no path leaks it.
  UniqueFd received;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
      received.Reset(fd);
    }
  }
  RETURN_IF_ERROR(CheckStatusByte(n == 1 ? status : -1, where, stream_id));
  if ((msg.msg_flags & MSG_CTRUNC) != 0 || !received) {
    return absl::InternalError(absl::StrCat(where, ": the daemon accepted but sent no fd"));
  }
  return received;
}

absl::StatusOr<UniqueFd> ConnectDataSocket(const std::string& host, uint32_t port,
                                           uint64_t stream_id, absl::string_view secret,
                                           absl::Duration timeout, absl::Duration read_timeout) {
  const std::string where = absl::StrCat("data socket ", host, ":", port);
  if (port == 0 || port > 65535) {
    return absl::InternalError(absl::StrCat("protocol error: data_port ", port));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat(where, ": ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat(where, ": no address"));
  UniqueFd sock;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s) {
      last = PosixError("socket", errno);
      continue;
    }
    if (absl::Status st = SetTimeouts(s.get(), timeout, timeout); !st.ok()) {
      last = st;
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last = Unavailable(PosixError(absl::StrCat("connecting to the ", where), errno));
      continue;
    }
    sock = std::move(s);
    break;
  }
  ::freeaddrinfo(found);
  if (!sock) return last;
  RETURN_IF_ERROR(SendRequest(sock.get(), stream_id, secret, where));
  uint8_t status = 0;
  ssize_t n;
  do {
    n = ::recv(sock.get(), &status, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Unavailable(PosixError(absl::StrCat(where, ": reading the reply"), errno));
  RETURN_IF_ERROR(CheckStatusByte(n == 1 ? status : -1, where, stream_id));
  RETURN_IF_ERROR(SetTimeouts(sock.get(), read_timeout, timeout));
  return sock;
}

absl::Status ReadFull(int fd, uint8_t* out, size_t length, absl::string_view where) {
  size_t got = 0;
  while (got < length) {
    const ssize_t n = ::recv(fd, out + got, length - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat(where, " closed after ", got, " of ", length, " bytes of a batch"));
    }
    const int e = errno;
    return Unavailable(
        PosixError(absl::StrCat(where, (e == EAGAIN || e == EWOULDBLOCK) ? ": timed out" : "",
                                " after ", got, " of ", length, " bytes of a batch"),
                   e));
  }
  return absl::OkStatus();
}

}  // namespace conveyor::client
