#include "server/transport/handshake.h"

#include <netdb.h>
#include <openssl/err.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

HandshakeRequest DecodeHandshake(const uint8_t bytes[kHandshakeRequestBytes]) {
  HandshakeRequest r;
  for (int i = 7; i >= 0; --i) r.stream_id = (r.stream_id << 8) | bytes[i];
  std::memcpy(r.secret.data(), bytes + 8, kSecretBytes);
  return r;
}

std::string PeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  if (addr.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t cred_len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) != 0) return "?";
    return absl::StrCat("pid ", cred.pid, " uid ", cred.uid);
  }
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return absl::StrCat(host, ":", port);
}

HandshakeAcceptor::HandshakeAcceptor(EpollLoop* loop, Options options, OnRequest on_request)
    : loop_(loop), options_(std::move(options)), on_request_(std::move(on_request)) {}

HandshakeAcceptor::~HandshakeAcceptor() = default;

absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> HandshakeAcceptor::Create(EpollLoop* loop,
                                                                             UniqueFd listen_fd,
                                                                             Options options,
                                                                             OnRequest on_request) {
  std::unique_ptr<HandshakeAcceptor> a(
      new HandshakeAcceptor(loop, std::move(options), std::move(on_request)));
  HandshakeAcceptor* raw = a.get();
  absl::StatusOr<std::unique_ptr<LoopListener>> listener = LoopListener::Create(
      a->options_.name, loop, std::move(listen_fd), EventKey(EventTag::kListen, 0),
      [raw](UniqueFd conn) { raw->Take(std::move(conn)); });
  if (!listener.ok()) return listener.status();
  a->listener_ = *std::move(listener);
  return a;
}

bool HandshakeAcceptor::Owns(uint64_t key) {
  const EventTag tag = TagOf(key);
  return tag == EventTag::kListen || tag == EventTag::kHandshake;
}

void HandshakeAcceptor::OnEvent(uint64_t key) {
  if (TagOf(key) == EventTag::kListen) {
    listener_->AcceptAll();
  } else if (TagOf(key) == EventTag::kHandshake) {
    Read(static_cast<int>(ValueOf(key)));
  }
}

void HandshakeAcceptor::Take(UniqueFd conn) {
  if (pending_.size() >= options_.max_pending) {
    if (!refusing_) {
      spdlog::warn(
          "{}: {} connections have not sent their handshake; closing new ones until "
          "fewer wait (last from {})",
          options_.name, pending_.size(), PeerName(conn.get()));
      refusing_ = true;
    }
    return;  // closes it
  }
  const int fd = conn.get();
  if (absl::Status st = loop_->Add(fd, EPOLLIN | EPOLLRDHUP,
                                   EventKey(EventTag::kHandshake, static_cast<uint64_t>(fd)));
      !st.ok()) {
    spdlog::warn("{} (of a new connection)", std::string(st.message()));
    return;
  }
  Pending& p = pending_[fd];
  if (options_.tls != nullptr) {
    p.tls = options_.tls->NewSession(fd);
    if (p.tls == nullptr) {
      pending_.erase(fd);  // closes it (logged)
      return;
    }
  }
  p.fd = std::move(conn);
  p.deadline = Clock::now() + options_.timeout;
}

void HandshakeAcceptor::Read(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.tls != nullptr) {
    if (!ReadTls(fd, p)) {
      pending_.erase(it);
      return;
    }
  } else {
    const ssize_t r = ::recv(fd, p.request + p.got, kHandshakeRequestBytes - p.got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) {
      spdlog::warn("{}: {} closed the connection after {} of {} handshake bytes", options_.name,
                   PeerName(fd), p.got, kHandshakeRequestBytes);
      pending_.erase(it);
      return;
    }
    p.got += static_cast<size_t>(r);
  }
  if (p.got < kHandshakeRequestBytes) return;
  const HandshakeRequest request = DecodeHandshake(p.request);
  SslPtr tls = std::move(p.tls);
  UniqueFd conn = std::move(p.fd);
  pending_.erase(it);
  if (pending_.size() < options_.max_pending) refusing_ = false;
  if (absl::Status st = loop_->Remove(fd); !st.ok()) {
    spdlog::warn("{}", std::string(st.message()));
    return;  // closes it: the owner could not add it again either
  }
  on_request_(std::move(conn), std::move(tls), request);
}

void HandshakeAcceptor::WatchWritable(int fd, Pending& p, bool writable) {
  if (p.want_write == writable) return;
  if (absl::Status st = loop_->Modify(fd, EPOLLIN | EPOLLRDHUP | (writable ? EPOLLOUT : 0u),
                                      EventKey(EventTag::kHandshake, static_cast<uint64_t>(fd)));
      !st.ok()) {
    spdlog::warn("{}", std::string(st.message()));
    return;  // the deadline still ends it
  }
  p.want_write = writable;
}

bool HandshakeAcceptor::ReadTls(int fd, Pending& p) {
  SSL* ssl = p.tls.get();
  // What an SSL call that returned `r` <= 0 means: true to wait for the
  // socket (the interest updated), false when the connection is over.
  auto wait_or_fail = [&](int r, const char* stage) {
    const int e = SSL_get_error(ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
      WatchWritable(fd, p, e == SSL_ERROR_WANT_WRITE);
      return true;
    }
    std::string why = TakeOpenSslErrors();
    if (why.empty())
      why = e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL
                ? "the client closed the connection"
                : absl::StrCat("SSL error ", e);
    spdlog::warn("{}: {} from {} failed: {}", options_.name, stage, PeerName(fd), why);
    return false;
  };
  ERR_clear_error();
  if (!p.tls_done) {
    const int r = SSL_do_handshake(ssl);
    if (r != 1) return wait_or_fail(r, "TLS handshake");
    p.tls_done = true;
    WatchWritable(fd, p, false);
  }
  // The request may already sit in OpenSSL's buffer: read until it is
  // complete or the socket has no more.
  while (p.got < kHandshakeRequestBytes) {
    const int r =
        SSL_read(ssl, p.request + p.got, static_cast<int>(kHandshakeRequestBytes - p.got));
    if (r <= 0) return wait_or_fail(r, "handshake request over TLS");
    p.got += static_cast<size_t>(r);
  }
  return true;
}

std::optional<HandshakeAcceptor::Clock::time_point> HandshakeAcceptor::Tick(Clock::time_point now) {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  if (std::optional<Clock::time_point> resume = listener_->Tick(now)) consider(*resume);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now >= it->second.deadline) {
      spdlog::warn("{}: {} sent {} of {} handshake bytes in {} ms; dropped", options_.name,
                   PeerName(it->first), it->second.got, kHandshakeRequestBytes,
                   std::chrono::duration_cast<std::chrono::milliseconds>(options_.timeout).count());
      it = pending_.erase(it);
    } else {
      consider(it->second.deadline);
      ++it;
    }
  }
  if (pending_.size() < options_.max_pending) refusing_ = false;
  return next;
}

}  // namespace conveyor::server
