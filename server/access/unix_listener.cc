#include "server/access/unix_listener.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/epoll_events.h"
#include "core/base/posix_error.h"
#include "server/access/unix_socket.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {
constexpr auto kRefusalLogInterval = std::chrono::seconds(60);
constexpr size_t kMaxRefusalEntries = 4096;
constexpr auto kMinPause = std::chrono::milliseconds(10);
constexpr auto kMaxPause = std::chrono::milliseconds(500);
}  // namespace

UnixListener::UnixListener(std::string path, UniqueFd listen_fd, UniqueFd epoll_fd,
                           UniqueFd stop_fd, UnixAccessPolicy policy,
                           UnixConnections* connections, OnAccept on_accept)
    : path_(std::move(path)),
      listen_fd_(std::move(listen_fd)),
      epoll_fd_(std::move(epoll_fd)),
      stop_fd_(std::move(stop_fd)),
      policy_(std::move(policy)),
      connections_(connections),
      on_accept_(std::move(on_accept)) {}

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Start(const std::string& path,
                                                                  mode_t mode,
                                                                  UnixAccessPolicy policy,
                                                                  UnixConnections* connections,
                                                                  OnAccept on_accept) {
  absl::StatusOr<UniqueFd> listening = ListenUnixSocket(path, mode, 128);
  if (!listening.ok()) return listening.status();
  auto fail = [&path](absl::Status st) {
    ::unlink(path.c_str());
    return st;
  };
  UniqueFd stop(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!stop) return fail(PosixError("unix socket: eventfd", errno));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return fail(PosixError("unix socket: epoll_create1", errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = EventKey(EventTag::kWake, 0);
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, stop.get(), &ev) != 0) {
    return fail(PosixError("unix socket: epoll_ctl ADD", errno));
  }
  ev.data.u64 = EventKey(EventTag::kListen, 0);
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, listening->get(), &ev) != 0) {
    return fail(PosixError("unix socket: epoll_ctl ADD of the listener", errno));
  }
  std::unique_ptr<UnixListener> l(new UnixListener(path, *std::move(listening), std::move(epoll),
                                                   std::move(stop), std::move(policy),
                                                   connections, std::move(on_accept)));
  UnixListener* raw = l.get();
  l->thread_ = std::thread([raw] { raw->Run(); });
  pthread_setname_np(l->thread_.native_handle(), "conveyor-unix");
  return l;
}

UnixListener::~UnixListener() { Stop(); }

void UnixListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    if (::write(stop_fd_.get(), &one, sizeof(one)) < 0) {
      spdlog::error("unix socket: {}",
                    std::string(PosixError("cannot signal stop", errno).message()));
    }
    thread_.join();
  }
  RemoveSocketFile(path_);
}

void UnixListener::Watch(bool watch) {
  epoll_event ev{};
  ev.events = watch ? EPOLLIN : 0u;
  ev.data.u64 = EventKey(EventTag::kListen, 0);
  if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, listen_fd_.get(), &ev) != 0) {
    spdlog::error("unix socket: {}",
                  std::string(PosixError("epoll_ctl MOD of the listener", errno).message()));
  }
}

void UnixListener::Run() {
  epoll_event events[8];
  Clock::duration pause{};
  std::optional<Clock::time_point> resume_at;
  uint64_t failed = 0;
  while (true) {
    int timeout_ms = -1;
    if (resume_at) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(*resume_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 1000));
    }
    const int n = ::epoll_wait(epoll_fd_.get(), events, 8, timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("unix socket: {}; it stops accepting connections",
                    std::string(PosixError("epoll_wait", errno).message()));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (TagOf(events[i].data.u64) == EventTag::kWake) return;  // Stop()
    }
    if (resume_at && Clock::now() < *resume_at) continue;
    if (resume_at) {
      resume_at.reset();
      Watch(true);
    }
    if (AcceptAll()) {
      if (accept_errno_ != 0) {
        spdlog::info("unix socket: accepting connections again after {} failed attempt(s)",
                     failed);
        accept_errno_ = 0;
        failed = 0;
        pause = {};
      }
      continue;
    }
    // Out of fds (or anything else that would fail again at once): the
    // listener stays readable, so pause rather than spin.
    ++failed;
    pause = pause == Clock::duration{} ? Clock::duration(kMinPause)
                                       : std::min<Clock::duration>(pause * 2, kMaxPause);
    Watch(false);
    resume_at = Clock::now() + pause;
  }
}

bool UnixListener::AcceptAll() {
  while (true) {
    UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn) {
      const int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return true;
      if (accept_errno_ == 0) {
        spdlog::warn("unix socket: cannot accept connections: {}; retrying every {} ms at most",
                     std::string(PosixError("accept", e).message()),
                     std::chrono::duration_cast<std::chrono::milliseconds>(kMaxPause).count());
      }
      accept_errno_ = e;
      return false;
    }
    Admit(std::move(conn));
  }
}

void UnixListener::Admit(UniqueFd conn) {
  absl::StatusOr<UnixPeer> peer = ReadUnixPeer(conn.get());
  if (!peer.ok()) {
    spdlog::warn("unix socket: connection closed: {}", std::string(peer.status().message()));
    return;
  }
  if (!policy_.Allows(*peer)) {
    LogRefusal(*peer);
    return;  // closes it before gRPC sees a byte
  }
  if (!connections_->Add(conn.get(), peer->credentials, policy_.IsOperator(*peer))) {
    spdlog::warn("unix socket: connection of pid {} closed: cannot stat it",
                 peer->credentials.pid);
    return;
  }
  on_accept_(std::move(conn));
}

void UnixListener::LogRefusal(const UnixPeer& peer) {
  const Clock::time_point now = Clock::now();
  if (refusals_.size() >= kMaxRefusalEntries) refusals_.clear();
  auto [it, first] = refusals_.try_emplace(peer.credentials.uid);
  Refusals& r = it->second;
  if (!first && now - r.last_logged < kRefusalLogInterval) {
    ++r.unlogged;
    return;
  }
  spdlog::warn(
      "unix socket: refused a connection from pid {}, uid {}, gid {}: not allowed by "
      "listen.allowed_uids / listen.allowed_gids{}",
      peer.credentials.pid, peer.credentials.uid, peer.credentials.gid,
      r.unlogged == 0 ? std::string()
                      : absl::StrCat(" (and ", r.unlogged, " more from this uid since last said)"));
  r.last_logged = now;
  r.unlogged = 0;
}

}  // namespace conveyor::server
