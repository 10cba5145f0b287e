#include "server/access/tcp_listener.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/epoll_events.h"
#include "core/base/posix_error.h"
#include "server/access/listen_address.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceBytes = sizeof(kPreface) - 1;  // 24
constexpr size_t kFrameHeaderBytes = 9;
constexpr uint8_t kTlsHandshakeRecord = 0x16;
constexpr auto kRefusalLogInterval = std::chrono::seconds(60);
// The estimate of open fds is recounted from /proc/self/fd at most this often.
constexpr auto kFdRecountInterval = std::chrono::milliseconds(20);
// While short of fds, how often the listener looks whether they are back.
constexpr auto kPressureRecheck = std::chrono::milliseconds(500);

// The peer's address without its port ("10.0.0.1", "::1"); "?" unknown.
std::string PeerHost(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, buf, sizeof(buf));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, buf, sizeof(buf));
  } else {
    return "?";
  }
  return buf;
}

// Open fds of this process, or -1 when they cannot be counted (which, when
// opendir fails for want of an fd, means there is none left).
int CountOpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory's own fd
}

// /proc/net/tcp's "ADDR:PORT" of an address: each 32-bit word as the
// kernel prints it (%08X of the word in memory), the port in hex.
std::string ProcAddress(const sockaddr_storage& a) {
  char out[64];
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    uint32_t w;
    std::memcpy(&w, &in->sin_addr, 4);
    std::snprintf(out, sizeof(out), "%08X:%04X", w, ntohs(in->sin_port));
    return out;
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  uint32_t w[4];
  std::memcpy(w, &in6->sin6_addr, 16);
  std::snprintf(out, sizeof(out), "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3],
                ntohs(in6->sin6_port));
  return out;
}

}  // namespace

namespace {

// An AF_INET6 address holding an IPv4 one (::ffff:a.b.c.d) as AF_INET.
sockaddr_storage Unmapped(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET6) return a;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
  if (!IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return a;
  sockaddr_storage out{};
  auto* in = reinterpret_cast<sockaddr_in*>(&out);
  in->sin_family = AF_INET;
  in->sin_port = in6->sin6_port;
  std::memcpy(&in->sin_addr, in6->sin6_addr.s6_addr + 12, 4);
  return out;
}

// The same IPv4 address as ::ffff:a.b.c.d.
sockaddr_storage Mapped(const sockaddr_storage& a) {
  if (a.ss_family != AF_INET) return a;
  const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
  sockaddr_storage out{};
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = in->sin_port;
  in6->sin6_addr.s6_addr[10] = 0xff;
  in6->sin6_addr.s6_addr[11] = 0xff;
  std::memcpy(in6->sin6_addr.s6_addr + 12, &in->sin_addr, 4);
  return out;
}

// The uid on the line of `path` whose local address is `local` and remote
// address `remote` (ProcAddress forms).
std::optional<uid_t> FindSocketOwner(const char* path, const std::string& local,
                                     const std::string& remote) {
  FILE* f = std::fopen(path, "re");
  if (f == nullptr) return std::nullopt;
  std::optional<uid_t> uid;
  char line[512];
  while (!uid && std::fgets(line, sizeof(line), f) != nullptr) {
    char l[80], r[80];
    unsigned st = 0;
    unsigned long owner = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid ...
    if (std::sscanf(line, " %*s %79s %79s %x %*s %*s %*s %lu", l, r, &st, &owner) != 4) continue;
    if (local == l && remote == r) uid = static_cast<uid_t>(owner);
  }
  std::fclose(f);
  return uid;
}

}  // namespace

std::optional<uid_t> LocalPeerUid(int fd) {
  sockaddr_storage ours{}, theirs{};
  socklen_t len = sizeof(ours);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &len) != 0) return std::nullopt;
  len = sizeof(theirs);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &len) != 0) return std::nullopt;
  if (ours.ss_family != theirs.ss_family ||
      (ours.ss_family != AF_INET && ours.ss_family != AF_INET6)) {
    return std::nullopt;
  }
  // The other end's line: its local address is our peer, its remote ours.
  // An IPv4 connection's other end may be an IPv6 socket (gRPC's clients
  // make dual-stack ones), listed in tcp6 as ::ffff:a.b.c.d, and the
  // other way round.
  ours = Unmapped(ours);
  theirs = Unmapped(theirs);
  if (ours.ss_family == AF_INET6) {
    return FindSocketOwner("/proc/net/tcp6", ProcAddress(theirs), ProcAddress(ours));
  }
  if (std::optional<uid_t> uid =
          FindSocketOwner("/proc/net/tcp", ProcAddress(theirs), ProcAddress(ours))) {
    return uid;
  }
  return FindSocketOwner("/proc/net/tcp6", ProcAddress(Mapped(theirs)), ProcAddress(Mapped(ours)));
}

FirstMessage CheckFirstMessage(absl::Span<const uint8_t> bytes, bool tls) {
  if (tls) {
    if (bytes.empty()) return FirstMessage::kIncomplete;
    if (bytes[0] != kTlsHandshakeRecord) return FirstMessage::kMalformed;
    if (bytes.size() < 5) return FirstMessage::kIncomplete;
    const size_t length = (size_t{bytes[3]} << 8) | bytes[4];
    if (length == 0 || 5 + length > kMaxFirstMessageBytes) return FirstMessage::kMalformed;
    return bytes.size() >= 5 + length ? FirstMessage::kComplete : FirstMessage::kIncomplete;
  }
  const size_t n = std::min(bytes.size(), kPrefaceBytes);
  if (std::memcmp(bytes.data(), kPreface, n) != 0) return FirstMessage::kMalformed;
  if (bytes.size() < kPrefaceBytes + kFrameHeaderBytes) return FirstMessage::kIncomplete;
  const uint8_t* h = bytes.data() + kPrefaceBytes;
  const size_t length = (size_t{h[0]} << 16) | (size_t{h[1]} << 8) | h[2];
  // Whatever frame it is (SETTINGS), one that cannot fit is no client's.
  if (kPrefaceBytes + kFrameHeaderBytes + length > kMaxFirstMessageBytes) {
    return FirstMessage::kMalformed;
  }
  return bytes.size() >= kPrefaceBytes + kFrameHeaderBytes + length ? FirstMessage::kComplete
                                                                    : FirstMessage::kIncomplete;
}

int FdHighWaterMark(int limit, int threads) {
  const int reserve = std::max({32, limit / 8, 2 * threads + 16});
  return std::max(limit - reserve, limit / 4);
}

const char* TcpRefusalName(TcpRefusal reason) {
  switch (reason) {
    case TcpRefusal::kPeerPendingCap: return "peer_pending_cap";
    case TcpRefusal::kPendingCap: return "pending_cap";
    case TcpRefusal::kFdReserve: return "fd_reserve";
    case TcpRefusal::kAcceptFailed: return "accept_failed";
    case TcpRefusal::kPendingTimeout: return "pending_timeout";
    case TcpRefusal::kMalformed: return "malformed";
    case TcpRefusal::kLocalUidRefused: return "local_uid_refused";
    case TcpRefusal::kCount: break;
  }
  return "?";
}

// ------------------------------------------------------- PendingConnections

PendingConnections::Eviction PendingConnections::ToEvictFor(const std::string& peer) const {
  if (auto it = by_peer_.find(peer); it != by_peer_.end() && it->second.size() >= max_per_peer_) {
    return {it->second.begin()->second, TcpRefusal::kPeerPendingCap};
  }
  if (by_fd_.size() >= max_total_ && !by_age_.empty()) {
    return {by_age_.begin()->second, TcpRefusal::kPendingCap};
  }
  return {};
}

int PendingConnections::Oldest() const { return by_age_.empty() ? -1 : by_age_.begin()->second; }

void PendingConnections::Add(int fd, const std::string& peer, Clock::time_point deadline) {
  const uint64_t seq = next_seq_++;
  by_fd_[fd] = Entry{peer, deadline, seq};
  by_age_[seq] = fd;
  by_peer_[peer][seq] = fd;
}

void PendingConnections::Remove(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  by_age_.erase(it->second.seq);
  auto p = by_peer_.find(it->second.peer);
  p->second.erase(it->second.seq);
  if (p->second.empty()) by_peer_.erase(p);
  by_fd_.erase(it);
}

std::vector<int> PendingConnections::Expired(Clock::time_point now) const {
  // Deadlines grow with age (one timeout for all): the oldest come first.
  std::vector<int> out;
  for (const auto& [seq, fd] : by_age_) {
    if (by_fd_.at(fd).deadline > now) break;
    out.push_back(fd);
  }
  return out;
}

std::optional<PendingConnections::Clock::time_point> PendingConnections::NextDeadline() const {
  if (by_age_.empty()) return std::nullopt;
  return by_fd_.at(by_age_.begin()->second).deadline;
}

size_t PendingConnections::PendingOf(const std::string& peer) const {
  auto it = by_peer_.find(peer);
  return it == by_peer_.end() ? 0 : it->second.size();
}

// -------------------------------------------------------------- TcpListener

TcpListener::TcpListener(int port, std::unique_ptr<EpollLoop> loop, Options options,
                         OnAccept on_accept, OnFdPressure on_fd_pressure)
    : port_(port),
      loop_(std::move(loop)),
      options_(options),
      on_accept_(std::move(on_accept)),
      on_fd_pressure_(std::move(on_fd_pressure)),
      pending_(options.max_pending_per_peer, options.max_pending) {}

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Start(const std::string& host_port,
                                                                Options options, OnAccept on_accept,
                                                                OnFdPressure on_fd_pressure) {
  // Every address of the host, as gRPC's own listener did ("localhost": ::1
  // and 127.0.0.1), on one port.
  absl::StatusOr<ListenSockets> bound =
      BindListenSockets(host_port, "TCP", BindAddresses::kEveryAddress, /*backlog=*/1024);
  if (!bound.ok()) return bound.status();
  std::vector<UniqueFd> sockets = std::move(bound->fds);
  const int bound_port = bound->port;
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("TCP listener");
  if (!loop.ok()) return loop.status();
  std::unique_ptr<TcpListener> l(new TcpListener(bound_port, *std::move(loop), options,
                                                 std::move(on_accept), std::move(on_fd_pressure)));
  TcpListener* raw = l.get();
  for (size_t i = 0; i < sockets.size(); ++i) {
    const int listen_fd = sockets[i].get();
    absl::StatusOr<std::unique_ptr<LoopListener>> listener = LoopListener::Create(
        "TCP " + host_port, raw->loop_.get(), std::move(sockets[i]), EventKey(EventTag::kListen, i),
        [raw, listen_fd](UniqueFd conn) { raw->Take(std::move(conn), listen_fd); });
    if (!listener.ok()) return listener.status();
    l->listeners_.push_back(*std::move(listener));
  }
  l->thread_ = std::thread([raw] { raw->Run(); });
  pthread_setname_np(l->thread_.native_handle(), "conveyor-tcp");
  return l;
}

TcpListener::~TcpListener() { Stop(); }

void TcpListener::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    loop_->Stop();
    thread_.join();
  }
  listeners_.clear();  // closes the listening sockets
  fds_.clear();        // and the pending connections
}

void TcpListener::Run() {
  const absl::Status st = loop_->Run(
      [this](uint64_t key, uint32_t events) {
        if (TagOf(key) == EventTag::kListen) {
          const size_t i = static_cast<size_t>(ValueOf(key));
          if (i >= listeners_.size()) return;
          LoopListener& listener = *listeners_[i];
          const uint64_t failures = listener.backoff().failures();
          listener.AcceptAll();
          if (listener.backoff().failures() != failures) AcceptFailed();
        } else if (TagOf(key) == EventTag::kHandshake) {
          const int fd = static_cast<int>(ValueOf(key));
          if (!pending_.Contains(fd)) return;
          if ((events & (EPOLLERR | EPOLLHUP)) != 0 && (events & EPOLLIN) == 0) {
            pending_.Remove(fd);
            fds_.erase(fd);  // the client gave up: no refusal of ours
            --fd_estimate_;
            pending_count_.store(pending_.size(), std::memory_order_relaxed);
            return;
          }
          Peek(fd, (events & (EPOLLRDHUP | EPOLLHUP)) != 0);
        }
      },
      [this](Clock::time_point now) { return Tick(now); });
  if (!st.ok()) {
    spdlog::error("TCP listener: {}; it stops accepting connections", std::string(st.message()));
  }
}

std::optional<TcpListener::Clock::time_point> TcpListener::Tick(Clock::time_point now) {
  for (int fd : pending_.Expired(now)) Drop(fd, TcpRefusal::kPendingTimeout);
  std::optional<Clock::time_point> next = pending_.NextDeadline();
  bool paused = false;
  for (const std::unique_ptr<LoopListener>& listener : listeners_) {
    const uint64_t failures = listener->backoff().failures();
    if (std::optional<Clock::time_point> resume = listener->Tick(now)) {
      next = next ? std::min(*next, *resume) : *resume;
    }
    if (listener->backoff().failures() != failures && listener->paused()) AcceptFailed();
    paused = paused || listener->paused();
  }
  if (short_of_fds_) {
    // No connection may come to say the fds are back: look now and then.
    if (!paused && OpenFds(now) < FdResumeMark()) {
      SetPressure(false);
    } else {
      const Clock::time_point again = now + kPressureRecheck;
      next = next ? std::min(*next, again) : again;
    }
  }
  return next;
}

int TcpListener::OpenFds(Clock::time_point now) {
  if (now - fd_counted_at_ >= kFdRecountInterval) {
    const int n = CountOpenFds();
    // Not even an fd to look: as many as the mark allows, and more.
    fd_estimate_ = n >= 0 ? n : options_.fd_high_water;
    fd_counted_at_ = now;
    open_fds_.store(fd_estimate_, std::memory_order_relaxed);
  }
  return fd_estimate_;
}

void TcpListener::Take(UniqueFd conn, int listen_fd) {
  const Clock::time_point now = Clock::now();
  const int fd = conn.get();
  ++fd_estimate_;  // `conn` (a recount below sees it anyway)
  if (options_.fd_high_water > 0 && OpenFds(now) >= options_.fd_high_water) {
    const int oldest = pending_.Oldest();
    if (oldest < 0) {
      // Nothing to evict: every fd past the mark belongs to gRPC's
      // connections or to the engine. Refused (closed) before a byte.
      --fd_estimate_;
      Count(TcpRefusal::kFdReserve);
      SetPressure(true);
      return;
    }
    Drop(oldest, TcpRefusal::kFdReserve);  // `conn` takes its place
  } else if (fd_estimate_ < FdResumeMark()) {
    SetPressure(false);
  }
  const std::string peer = PeerHost(fd);
  for (PendingConnections::Eviction e = pending_.ToEvictFor(peer); e.fd >= 0;
       e = pending_.ToEvictFor(peer)) {
    Drop(e.fd, e.reason);
  }
  if (absl::Status st = loop_->Add(fd, EPOLLIN | EPOLLRDHUP | EPOLLET,
                                   EventKey(EventTag::kHandshake, static_cast<uint64_t>(fd)));
      !st.ok()) {
    spdlog::warn("TCP listener: connection from {} closed: {}", peer, std::string(st.message()));
    return;
  }
  pending_.Add(fd, peer, now + options_.pending_timeout);
  fds_.emplace(fd, Held{std::move(conn), listen_fd});
  pending_count_.store(pending_.size(), std::memory_order_relaxed);
  Peek(fd, false);  // the first bytes may be there already
}

int TcpListener::FdResumeMark() const {
  // Some way below the mark, so that health does not flap with every
  // connection that comes and goes at the mark.
  // No mark (no fd limit known): only accept() failing means short of fds.
  if (options_.fd_high_water <= 0) return std::numeric_limits<int>::max();
  return options_.fd_high_water - std::max(8, options_.fd_high_water / 32);
}

void TcpListener::AcceptFailed() {
  Count(TcpRefusal::kAcceptFailed);
  SetPressure(true);
}

void TcpListener::Peek(int fd, bool hung_up) {
  std::vector<uint8_t>& buf = peek_buffer_;
  buf.resize(kMaxFirstMessageBytes);
  ssize_t n;
  do {
    n = ::recv(fd, buf.data(), buf.size(), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !hung_up) return;  // the next edge
  if (n <= 0) {
    // Closed by its client (or broken) before saying anything useful.
    pending_.Remove(fd);
    fds_.erase(fd);
    --fd_estimate_;
    pending_count_.store(pending_.size(), std::memory_order_relaxed);
    return;
  }
  switch (
      CheckFirstMessage(absl::MakeConstSpan(buf.data(), static_cast<size_t>(n)), options_.tls)) {
    case FirstMessage::kIncomplete:
      if (hung_up) {  // and nothing more will come
        pending_.Remove(fd);
        fds_.erase(fd);
        --fd_estimate_;
        pending_count_.store(pending_.size(), std::memory_order_relaxed);
      }
      return;
    case FirstMessage::kMalformed: Drop(fd, TcpRefusal::kMalformed); return;
    case FirstMessage::kComplete: break;
  }
  if (options_.admits_local_uid) {
    if (std::optional<uid_t> uid = LocalPeerUid(fd); uid && !options_.admits_local_uid(*uid)) {
      refused_uid_ = *uid;
      Drop(fd, TcpRefusal::kLocalUidRefused);
      return;
    }
  }
  pending_.Remove(fd);
  pending_count_.store(pending_.size(), std::memory_order_relaxed);
  (void)loop_->Remove(fd);
  auto it = fds_.find(fd);
  UniqueFd conn = std::move(it->second.fd);
  const int listen_fd = it->second.listen_fd;
  fds_.erase(it);
  on_accept_(std::move(conn), listen_fd);
}

void TcpListener::Drop(int fd, TcpRefusal reason) {
  pending_.Remove(fd);
  fds_.erase(fd);  // closing it takes it out of the epoll set
  --fd_estimate_;
  pending_count_.store(pending_.size(), std::memory_order_relaxed);
  Count(reason);
}

void TcpListener::Count(TcpRefusal reason) {
  const size_t i = static_cast<size_t>(reason);
  refused_[i].fetch_add(1, std::memory_order_relaxed);
  LogState& s = log_[i];
  const Clock::time_point now = Clock::now();
  if (s.ever && now - s.last_logged < kRefusalLogInterval) {
    ++s.unlogged;
    return;
  }
  const std::string since =
      s.unlogged == 0 ? std::string()
                      : absl::StrCat(" (and ", s.unlogged, " more since the last such line)");
  switch (reason) {
    case TcpRefusal::kPeerPendingCap:
      spdlog::warn(
          "TCP {}: closed the oldest of {} connections from one peer that have not completed "
          "their handshake{}",
          port_, options_.max_pending_per_peer, since);
      break;
    case TcpRefusal::kPendingCap:
      spdlog::warn(
          "TCP {}: closed the oldest of {} connections that have not completed their "
          "handshake{}",
          port_, options_.max_pending, since);
      break;
    case TcpRefusal::kFdReserve:
      spdlog::warn(
          "TCP {}: the daemon's open fds reached its mark of {} of RLIMIT_NOFILE (the rest is "
          "kept for sample reads): closing connections that have not completed their handshake, "
          "refusing new ones while none is left to close{}",
          port_, options_.fd_high_water, since);
      break;
    case TcpRefusal::kAcceptFailed:
      // AcceptBackoff says so in its own words, once per episode.
      break;
    case TcpRefusal::kPendingTimeout:
      spdlog::warn(
          "TCP {}: closed a connection that sent no complete first message in {} s{}", port_,
          std::chrono::duration_cast<std::chrono::seconds>(options_.pending_timeout).count(),
          since);
      break;
    case TcpRefusal::kMalformed:
      spdlog::warn("TCP {}: closed a connection whose first bytes are not {}{}", port_,
                   options_.tls ? "a TLS handshake" : "an HTTP/2 connection preface", since);
      break;
    case TcpRefusal::kLocalUidRefused:
      spdlog::warn(
          "TCP {}: refused a connection of local uid {}: not allowed by listen.allowed_uids / "
          "listen.allowed_gids, and TCP asks for no token{}",
          port_, refused_uid_, since);
      break;
    case TcpRefusal::kCount: break;
  }
  s.ever = true;
  s.last_logged = now;
  s.unlogged = 0;
}

void TcpListener::SetPressure(bool short_of_fds) {
  if (short_of_fds == short_of_fds_) return;
  short_of_fds_ = short_of_fds;
  short_of_fds_metric_.store(short_of_fds, std::memory_order_relaxed);
  if (!short_of_fds) {
    spdlog::info("TCP {}: accepting connections again", port_);
  }
  if (on_fd_pressure_) on_fd_pressure_(short_of_fds);
}

std::string TcpListener::MetricsText() const {
  std::string out =
      "# HELP conveyor_tcp_connections_refused_total TCP connections closed before they reached "
      "gRPC, by reason.\n"
      "# TYPE conveyor_tcp_connections_refused_total counter\n";
  for (size_t i = 0; i < refused_.size(); ++i) {
    absl::StrAppend(&out, "conveyor_tcp_connections_refused_total{reason=\"",
                    TcpRefusalName(static_cast<TcpRefusal>(i)), "\"} ",
                    refused_[i].load(std::memory_order_relaxed), "\n");
  }
  absl::StrAppend(
      &out,
      "# HELP conveyor_tcp_connections_pending TCP connections whose first message has not "
      "come yet.\n# TYPE conveyor_tcp_connections_pending gauge\nconveyor_tcp_connections_pending ",
      pending_count_.load(std::memory_order_relaxed),
      "\n# HELP conveyor_tcp_accepting_short_of_fds 1 while new TCP connections are refused for "
      "want of fds.\n# TYPE conveyor_tcp_accepting_short_of_fds gauge\n"
      "conveyor_tcp_accepting_short_of_fds ",
      short_of_fds_metric_.load(std::memory_order_relaxed) ? 1 : 0,
      "\n# HELP conveyor_open_fds Open fds of the daemon when the TCP listener last counted.\n"
      "# TYPE conveyor_open_fds gauge\nconveyor_open_fds ",
      open_fds_.load(std::memory_order_relaxed),
      "\n# HELP conveyor_fd_high_water_mark Open fds past which new TCP connections are "
      "refused.\n# TYPE conveyor_fd_high_water_mark gauge\nconveyor_fd_high_water_mark ",
      options_.fd_high_water, "\n");
  return out;
}

}  // namespace conveyor::server
