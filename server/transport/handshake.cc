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

namespace {
constexpr auto kMinPause = std::chrono::milliseconds(10);
constexpr auto kMaxPause = std::chrono::milliseconds(500);

}  // namespace

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
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return absl::StrCat(host, ":", port);
}

HandshakeAcceptor::HandshakeAcceptor(int epoll_fd, UniqueFd listen_fd, Options options,
                                     OnRequest on_request)
    : epoll_fd_(epoll_fd),
      listen_fd_(std::move(listen_fd)),
      options_(std::move(options)),
      on_request_(std::move(on_request)) {}

HandshakeAcceptor::~HandshakeAcceptor() = default;

absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> HandshakeAcceptor::Create(
    int epoll_fd, UniqueFd listen_fd, Options options, OnRequest on_request) {
  std::unique_ptr<HandshakeAcceptor> a(new HandshakeAcceptor(
      epoll_fd, std::move(listen_fd), std::move(options), std::move(on_request)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = EventKey(EventTag::kListen, 0);
  if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, a->listen_fd_.get(), &ev) != 0) {
    return PosixError(absl::StrCat(a->options_.name, ": epoll_ctl ADD of the listener"), errno);
  }
  return a;
}

bool HandshakeAcceptor::Owns(uint64_t key) {
  const EventTag tag = TagOf(key);
  return tag == EventTag::kListen || tag == EventTag::kHandshake;
}

void HandshakeAcceptor::OnEvent(uint64_t key) {
  if (TagOf(key) == EventTag::kListen) {
    AcceptAll();
  } else if (TagOf(key) == EventTag::kHandshake) {
    Read(static_cast<int>(ValueOf(key)));
  }
}

absl::Status HandshakeAcceptor::WatchListener(bool watch) {
  epoll_event ev{};
  ev.events = watch ? EPOLLIN : 0u;
  ev.data.u64 = EventKey(EventTag::kListen, 0);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_.get(), &ev) != 0) {
    return PosixError(absl::StrCat(options_.name, ": epoll_ctl MOD of the listener"), errno);
  }
  return absl::OkStatus();
}

void HandshakeAcceptor::AcceptAll() {
  while (!paused_) {
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) {
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      // Out of fds (or anything else that would fail again at once): the
      // listener stays readable, so pause rather than spin.
      Pause(e);
      return;
    }
    if (in_episode_) {
      spdlog::info("{}: accepting connections again after {} failed attempt(s)", options_.name,
                   failed_accepts_);
      in_episode_ = false;
      failed_accepts_ = 0;
      backoff_ = {};
    }
    if (pending_.size() >= options_.max_pending) {
      if (!refusing_) {
        spdlog::warn("{}: {} connections have not sent their handshake; closing new ones until "
                     "fewer wait (last from {})",
                     options_.name, pending_.size(), PeerName(conn.get()));
        refusing_ = true;
      }
      continue;  // closes it
    }
    const int fd = conn.get();
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = EventKey(EventTag::kHandshake, static_cast<uint64_t>(fd));
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      spdlog::warn("{}: {}", options_.name,
                   std::string(PosixError("epoll_ctl ADD of a new connection", errno).message()));
      continue;
    }
    Pending& p = pending_[fd];
    if (options_.tls != nullptr) {
      p.tls = options_.tls->NewSession(fd);
      if (p.tls == nullptr) {
        pending_.erase(fd);  // closes it (logged)
        continue;
      }
    }
    p.fd = std::move(conn);
    p.deadline = Clock::now() + options_.timeout;
  }
}

void HandshakeAcceptor::Pause(int error_number) {
  ++failed_accepts_;
  if (!in_episode_) {
    in_episode_ = true;
    backoff_ = kMinPause;
    spdlog::warn("{}: cannot accept connections: {}; retrying every {} ms at most until it can",
                 options_.name, std::string(PosixError("accept", error_number).message()),
                 std::chrono::duration_cast<std::chrono::milliseconds>(kMaxPause).count());
  } else {
    backoff_ = std::min<Clock::duration>(backoff_ * 2, kMaxPause);
  }
  if (absl::Status st = WatchListener(false); !st.ok()) {
    // Still watched: the loop would spin on it, so the pause is kept by
    // the wait's timeout only — log it, the wait below still bounds it.
    spdlog::error("{}", std::string(st.message()));
  }
  paused_ = true;
  resume_at_ = Clock::now() + backoff_;
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
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr) != 0) {
    spdlog::warn("{}: {}", options_.name,
                 std::string(PosixError("epoll_ctl DEL", errno).message()));
    return;  // closes it: the owner could not add it again either
  }
  on_request_(std::move(conn), std::move(tls), request);
}

void HandshakeAcceptor::WatchWritable(int fd, Pending& p, bool writable) {
  if (p.want_write == writable) return;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (writable ? EPOLLOUT : 0u);
  ev.data.u64 = EventKey(EventTag::kHandshake, static_cast<uint64_t>(fd));
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev) != 0) {
    spdlog::warn("{}: {}", options_.name, std::string(PosixError("epoll_ctl MOD", errno).message()));
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
    if (why.empty()) why = e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL
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
    const int r = SSL_read(ssl, p.request + p.got, static_cast<int>(kHandshakeRequestBytes - p.got));
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
  if (paused_) {
    if (now >= resume_at_) {
      if (absl::Status st = WatchListener(true); !st.ok()) {
        spdlog::error("{}", std::string(st.message()));
        resume_at_ = now + backoff_;  // try again after another pause
        consider(resume_at_);
      } else {
        paused_ = false;
        AcceptAll();  // may pause again
        if (paused_) consider(resume_at_);
      }
    } else {
      consider(resume_at_);
    }
  }
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
