#include "server/access/unix_listener.h"

#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "core/base/epoll_events.h"
#include "core/base/posix_error.h"
#include "server/access/unix_socket.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {
constexpr auto kRefusalLogInterval = std::chrono::seconds(60);
constexpr size_t kMaxRefusalEntries = 4096;
}  // namespace

UnixListener::UnixListener(std::string path, std::unique_ptr<EpollLoop> loop,
                           UnixAccessPolicy policy, UnixConnections* connections,
                           OnAccept on_accept)
    : path_(std::move(path)),
      loop_(std::move(loop)),
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
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("unix socket");
  if (!loop.ok()) return fail(loop.status());
  std::unique_ptr<UnixListener> l(new UnixListener(path, *std::move(loop), std::move(policy),
                                                   connections, std::move(on_accept)));
  UnixListener* raw = l.get();
  absl::StatusOr<std::unique_ptr<LoopListener>> listener = LoopListener::Create(
      "unix socket", raw->loop_.get(), *std::move(listening), EventKey(EventTag::kListen, 0),
      [raw](UniqueFd conn) { raw->Admit(std::move(conn)); });
  if (!listener.ok()) return fail(listener.status());
  l->listener_ = *std::move(listener);
  l->thread_ = std::thread([raw] { raw->Run(); });
  pthread_setname_np(l->thread_.native_handle(), "conveyor-unix");
  return l;
}

UnixListener::~UnixListener() { Stop(); }

void UnixListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    loop_->Stop();
    thread_.join();
  }
  listener_.reset();  // closes the listening socket
  RemoveSocketFile(path_);
}

void UnixListener::Run() {
  const absl::Status st = loop_->Run(
      [this](uint64_t key, uint32_t /*events*/) {
        if (TagOf(key) == EventTag::kListen) listener_->AcceptAll();
      },
      [this](EpollLoop::Clock::time_point now) { return listener_->Tick(now); });
  if (!st.ok()) {
    spdlog::error("unix socket: {}; it stops accepting connections", std::string(st.message()));
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
    spdlog::warn("unix socket: connection of pid {} closed: cannot stat it", peer->credentials.pid);
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
