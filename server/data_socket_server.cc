#include "server/data_socket_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kDrainTimeout = std::chrono::seconds(10);
constexpr size_t kRequestBytes = 8 + kSecretBytes;
// Connections that have not sent their request yet: more are closed at once
// (a flood of idle connections must not grow without bound).
constexpr size_t kMaxPendingHandshakes = 128;
constexpr uint8_t kStatusOk = 0;
constexpr uint8_t kStatusRefused = 1;

// What an epoll event is about: the tag in the top bits of its u64, a file
// descriptor (handshakes) or a stream id (connections) below.
enum Tag : uint64_t { kListen = 1, kWake = 2, kHandshake = 3, kConnection = 4 };
constexpr int kTagShift = 60;
constexpr uint64_t kValueMask = (uint64_t{1} << kTagShift) - 1;
uint64_t Key(Tag tag, uint64_t value) { return (uint64_t{tag} << kTagShift) | value; }

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

std::string PeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return absl::StrCat(host, ":", port);
}

// Splits "HOST:PORT" / "[V6]:PORT" / ":PORT".
absl::Status SplitHostPort(const std::string& text, std::string* host, std::string* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data socket address '", text, "' is not HOST:PORT"));
  }
  *host = text.substr(0, colon);
  *port = text.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int p = 0;
  if (!absl::SimpleAtoi(*port, &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("data socket address '", text, "': port must be 0 … 65535"));
  }
  return absl::OkStatus();
}

struct Chunk {
  const uint8_t* data;
  size_t size;
  size_t sent;
  std::shared_ptr<const void> keep_alive;
};

struct ChannelState {
  Secret secret{};
  std::function<void(absl::Status)> on_failure;
  UniqueFd fd;  // the client's connection, once it has proved the secret
  std::deque<Chunk> queue;
  bool closing = false;         // Channel::Close() or Abort() was called
  bool aborted = false;         // Channel::Abort(): drop everything now
  bool want_writable = false;   // EPOLLOUT is registered (server thread only)
  Clock::time_point deadline;   // connect by (not connected), flush by (closing)
};

}  // namespace

class DataSocketServer::Core {
 public:
  Core(UniqueFd listen_fd, UniqueFd wake_fd, UniqueFd epoll_fd)
      : listen_fd_(std::move(listen_fd)),
        wake_fd_(std::move(wake_fd)),
        epoll_fd_(std::move(epoll_fd)) {}

  // --- called from any thread -------------------------------------------
  void Register(uint64_t stream_id, const Secret& secret,
                std::function<void(absl::Status)> on_failure) {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    ChannelState& ch = channels_[stream_id];
    ch.secret = secret;
    ch.on_failure = std::move(on_failure);
    ch.deadline = Clock::now() + kConnectTimeout;
    Wake();  // the thread's next timeout may now be earlier
  }

  void Send(uint64_t stream_id, const uint8_t* data, size_t size,
            std::shared_ptr<const void> keep_alive) {
    absl::MutexLock lock(&mu_);
    auto it = channels_.find(stream_id);
    if (stopped_ || it == channels_.end() || it->second.closing) return;  // dropped
    const bool was_empty = it->second.queue.empty();
    it->second.queue.push_back(Chunk{data, size, 0, std::move(keep_alive)});
    // A non-empty queue is being written already (or waits for the
    // connection, which flushes it).
    if (was_empty && it->second.fd.valid()) Wake();
  }

  void Close(uint64_t stream_id, bool abort) {
    absl::MutexLock lock(&mu_);
    auto it = channels_.find(stream_id);
    if (it == channels_.end()) return;
    if (abort) it->second.aborted = true;
    if (!it->second.closing) {
      it->second.closing = true;
      it->second.deadline = Clock::now() + kDrainTimeout;
    }
    Wake();
  }

  // From here on Register and Send are dropped; the thread ends at its next
  // wake-up and closes every connection.
  void RequestStop() {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    Wake();
  }

  // --- the server's thread ----------------------------------------------
  absl::Status Arm() {
    for (auto [fd, tag] : {std::pair{listen_fd_.get(), kListen}, std::pair{wake_fd_.get(), kWake}}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = Key(tag, 0);
      if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Errno("epoll_ctl");
    }
    return absl::OkStatus();
  }

  void Run() {
    epoll_event events[64];
    while (true) {
      const int n = ::epoll_wait(epoll_fd_.get(), events, 64, NextTimeoutMs());
      if (n < 0) {
        if (errno == EINTR) continue;
        spdlog::error("data socket: epoll_wait: {}", strerror(errno));
        break;
      }
      {
        absl::MutexLock lock(&mu_);
        if (stopped_) break;
      }
      for (int i = 0; i < n; ++i) {
        const uint64_t value = events[i].data.u64 & kValueMask;
        switch (static_cast<Tag>(events[i].data.u64 >> kTagShift)) {
          case kListen:
            AcceptAll();
            break;
          case kWake: {
            uint64_t count;
            while (::read(wake_fd_.get(), &count, sizeof(count)) > 0) {
            }
            break;
          }
          case kHandshake:
            ReadHandshake(static_cast<int>(value));
            break;
          case kConnection:
            if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
              ConnectionReadable(value);
            } else if (events[i].events & EPOLLOUT) {
              Flush(value);
            }
            break;
        }
      }
      Service();
    }
    Shutdown();
  }

 private:
  struct Handshake {
    UniqueFd fd;
    uint8_t request[kRequestBytes];
    size_t got = 0;
    Clock::time_point deadline;
  };

  void Wake() {
    const uint64_t one = 1;
    (void)::write(wake_fd_.get(), &one, sizeof(one));  // a full counter is still a wake-up
  }

  void SetInterest(int fd, uint64_t stream_id, bool writable) {
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (writable ? EPOLLOUT : 0u);
    ev.data.u64 = Key(kConnection, stream_id);
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
      spdlog::error("data socket: epoll_ctl: {}", strerror(errno));
    }
  }

  int NextTimeoutMs() {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) {
      if (!next || t < *next) next = t;
    };
    for (const auto& [fd, h] : handshakes_) consider(h.deadline);
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, ch] : channels_) {
        if (!ch.fd.valid() || ch.closing) consider(ch.deadline);
      }
    }
    if (!next) return -1;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, 60'000));
  }

  void AcceptAll() {
    while (true) {
      UniqueFd conn(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!conn) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          spdlog::warn("data socket: accept: {}", strerror(errno));
        }
        return;
      }
      const int fd = conn.get();
      if (handshakes_.size() >= kMaxPendingHandshakes) {
        spdlog::warn("data socket: {} handshakes pending; closed the connection from {}",
                     handshakes_.size(), PeerName(fd));
        continue;
      }
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = Key(kHandshake, static_cast<uint64_t>(fd));
      if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
        spdlog::warn("data socket: epoll_ctl: {}", strerror(errno));
        continue;
      }
      Handshake& h = handshakes_[fd];
      h.fd = std::move(conn);
      h.deadline = Clock::now() + kHandshakeTimeout;
    }
  }

  void ReadHandshake(int fd) {
    auto hit = handshakes_.find(fd);
    if (hit == handshakes_.end()) return;
    Handshake& h = hit->second;
    const ssize_t r = ::recv(fd, h.request + h.got, kRequestBytes - h.got, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) {
      spdlog::warn("data socket: {} closed the connection after {} of {} request bytes",
                   PeerName(fd), h.got, kRequestBytes);
      handshakes_.erase(hit);
      return;
    }
    h.got += static_cast<size_t>(r);
    if (h.got < kRequestBytes) return;

    const uint64_t stream_id = DecodeStreamId(h.request);
    Secret secret;
    std::memcpy(secret.data(), h.request + 8, kSecretBytes);
    UniqueFd conn = std::move(h.fd);
    handshakes_.erase(hit);
    bool accepted = false;
    {
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      static const Secret kNone{};
      // Compare against something either way, so an unknown id costs the same.
      // A closed stream's client may still connect: its batches are queued.
      const bool open = it != channels_.end() && !it->second.fd.valid() && !it->second.aborted;
      accepted = ConstantTimeEqual(open ? it->second.secret : kNone, secret) && open;
      if (accepted) {
        // A fresh connection's send buffer is empty: the byte always fits.
        if (::send(fd, &kStatusOk, 1, MSG_DONTWAIT | MSG_NOSIGNAL) != 1) {
          spdlog::warn("data socket: stream {}: cannot answer {}: {}", stream_id, PeerName(fd),
                       strerror(errno));
          return;  // the client retries or its stream times out
        }
        SetInterest(fd, stream_id, false);
        it->second.fd = std::move(conn);
      }
    }
    if (!accepted) {
      spdlog::warn("data socket: refused {} for stream {}: unknown stream, already connected, or "
                   "wrong secret",
                   PeerName(fd), stream_id);
      (void)::send(fd, &kStatusRefused, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      return;  // closes
    }
    spdlog::debug("data socket: stream {} connected from {}", stream_id, PeerName(fd));
    Flush(stream_id);
  }

  // The client sends nothing after its request: readable means closed (or a
  // protocol error, handled the same way).
  void ConnectionReadable(uint64_t stream_id) {
    int fd = -1;
    {
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      if (it == channels_.end() || !it->second.fd.valid()) return;
      fd = it->second.fd.get();
    }
    char byte;
    const ssize_t r = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    Fail(stream_id, absl::UnavailableError(
                        r > 0 ? "the client sent bytes on the data socket (it only receives)"
                              : "the client closed the data socket"));
  }

  // Writes what is queued for the stream until done or the socket is full.
  void Flush(uint64_t stream_id) {
    std::vector<std::shared_ptr<const void>> done;  // dropped outside the lock
    while (true) {
      int fd;
      const uint8_t* p;
      size_t n;
      {
        absl::MutexLock lock(&mu_);
        auto it = channels_.find(stream_id);
        if (it == channels_.end() || !it->second.fd.valid() || it->second.aborted) break;
        ChannelState& ch = it->second;
        if (ch.queue.empty()) {
          if (ch.want_writable) {
            ch.want_writable = false;
            SetInterest(ch.fd.get(), stream_id, false);
          }
          break;
        }
        const Chunk& c = ch.queue.front();
        fd = ch.fd.get();
        p = c.data + c.sent;
        n = c.size - c.sent;
      }
      // Outside the lock: a send of megabytes takes a while, and Send()
      // callers (engine and gRPC threads) must not wait for it. Only this
      // thread removes chunks or connections, so `p` stays valid.
      const ssize_t r = n == 0 ? 0 : ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        absl::MutexLock lock(&mu_);
        auto it = channels_.find(stream_id);
        if (it != channels_.end() && !it->second.want_writable) {
          it->second.want_writable = true;
          SetInterest(fd, stream_id, true);
        }
        break;
      }
      if (r < 0) {
        Fail(stream_id, absl::UnavailableError(
                            absl::StrCat("writing to the data socket failed: ", strerror(errno))));
        break;
      }
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      if (it == channels_.end()) break;
      Chunk& c = it->second.queue.front();
      c.sent += static_cast<size_t>(r);
      if (c.sent == c.size) {
        done.push_back(std::move(c.keep_alive));
        it->second.queue.pop_front();
      }
    }
  }

  // Ends a stream's connection; tells the stream unless it was closing anyway.
  void Fail(uint64_t stream_id, absl::Status why) {
    std::function<void(absl::Status)> notify;
    std::optional<ChannelState> gone;  // destroyed outside the lock
    {
      absl::MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      if (it == channels_.end()) return;
      if (!it->second.closing) notify = std::move(it->second.on_failure);
      gone.emplace(std::move(it->second));
      channels_.erase(it);
    }
    spdlog::info("data socket: stream {}: {}", stream_id, std::string(why.message()));
    if (notify) notify(std::move(why));
  }

  // Flushes connected channels, ends closed ones, enforces the deadlines.
  void Service() {
    std::vector<uint64_t> to_flush;
    std::vector<std::pair<uint64_t, absl::Status>> to_fail;
    std::vector<ChannelState> finished;  // destroyed outside the lock
    const Clock::time_point now = Clock::now();
    {
      absl::MutexLock lock(&mu_);
      for (auto it = channels_.begin(); it != channels_.end();) {
        ChannelState& ch = it->second;
        const bool connected = ch.fd.valid();
        if (ch.closing) {
          // Done when aborted or everything is written; a client that has
          // not connected yet (a short stream can end before it does) or
          // reads slowly gets until the deadline.
          const bool drained = connected && ch.queue.empty();
          if (ch.aborted || drained || now >= ch.deadline) {
            if (!ch.aborted && !drained && !ch.queue.empty()) {
              spdlog::warn("data socket: stream {}: {} batch(es) still unread {} s after the "
                           "stream ended; dropped",
                           it->first, ch.queue.size(), std::chrono::seconds(kDrainTimeout).count());
            }
            finished.push_back(std::move(ch));
            it = channels_.erase(it);
            continue;
          }
          if (connected && !ch.queue.empty() && !ch.want_writable) to_flush.push_back(it->first);
          ++it;
          continue;
        }
        if (!connected && now >= ch.deadline) {
          to_fail.emplace_back(it->first,
                               absl::FailedPreconditionError(absl::StrCat(
                                   "the client did not connect its data socket within ",
                                   std::chrono::seconds(kConnectTimeout).count(), " s")));
        } else if (connected && !ch.queue.empty() && !ch.want_writable) {
          to_flush.push_back(it->first);
        }
        ++it;
      }
    }
    for (auto& [id, why] : to_fail) Fail(id, std::move(why));
    for (uint64_t id : to_flush) Flush(id);
    for (auto it = handshakes_.begin(); it != handshakes_.end();) {
      if (now >= it->second.deadline) {
        spdlog::warn("data socket: {} sent {} of {} request bytes in {} s; dropped",
                     PeerName(it->first), it->second.got, kRequestBytes,
                     std::chrono::seconds(kHandshakeTimeout).count());
        it = handshakes_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void Shutdown() {
    std::map<uint64_t, ChannelState> gone;
    {
      absl::MutexLock lock(&mu_);
      stopped_ = true;
      gone.swap(channels_);
    }
    handshakes_.clear();
  }

  const UniqueFd listen_fd_;
  const UniqueFd wake_fd_;  // eventfd: the channels changed, or Stop()
  const UniqueFd epoll_fd_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, ChannelState> channels_ ABSL_GUARDED_BY(mu_);

  std::map<int, Handshake> handshakes_;  // the server's thread only
};

DataSocketServer::Channel::~Channel() { Close(); }

void DataSocketServer::Channel::Send(const uint8_t* data, size_t size,
                                     std::shared_ptr<const void> keep_alive) {
  core_->Send(stream_id_, data, size, std::move(keep_alive));
}

void DataSocketServer::Channel::Close() { core_->Close(stream_id_, /*abort=*/false); }

void DataSocketServer::Channel::Abort() { core_->Close(stream_id_, /*abort=*/true); }

absl::StatusOr<std::unique_ptr<DataSocketServer>> DataSocketServer::Start(
    const std::string& host_port) {
  std::string host, port;
  if (absl::Status st = SplitHostPort(host_port, &host, &port); !st.ok()) return st;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const char* node = host.empty() || host == "*" ? nullptr : host.c_str();
  if (int rc = ::getaddrinfo(node, port.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data socket address '", host_port, "': ", gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> addrs(found, &::freeaddrinfo);
  UniqueFd listen_fd;
  std::string last_error = "no address";
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    UniqueFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                         a->ai_protocol));
    if (!fd) {
      last_error = strerror(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
      last_error = strerror(errno);
      continue;
    }
    listen_fd = std::move(fd);
    break;
  }
  if (!listen_fd) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on data socket ", host_port, ": ", last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(listen_fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return Errno("getsockname");
  }
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!wake || !epoll) return Errno("eventfd/epoll");
  auto core =
      std::make_shared<Core>(std::move(listen_fd), std::move(wake), std::move(epoll));
  if (absl::Status st = core->Arm(); !st.ok()) return st;
  std::unique_ptr<DataSocketServer> server(new DataSocketServer(core, bound_port));
  server->thread_ = std::thread([core] { core->Run(); });
  return server;
}

DataSocketServer::~DataSocketServer() { Stop(); }

void DataSocketServer::Stop() {
  if (!thread_.joinable()) return;
  core_->RequestStop();
  thread_.join();
}

std::unique_ptr<DataSocketServer::Channel> DataSocketServer::Open(
    uint64_t stream_id, const Secret& secret, std::function<void(absl::Status)> on_failure) {
  core_->Register(stream_id, secret, std::move(on_failure));
  return std::unique_ptr<Channel>(new Channel(core_, stream_id));
}

}  // namespace conveyor::server
