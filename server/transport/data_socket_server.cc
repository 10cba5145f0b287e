#include "server/transport/data_socket_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/base/epoll_events.h"
#include "core/base/epoll_loop.h"
#include "core/base/mutex.h"
#include "core/base/posix_error.h"
#include "server/access/listen_address.h"
#include "server/transport/handshake.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kDrainTimeout = std::chrono::seconds(10);

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
  SslPtr tls;   // its TLS session (listen.tls); declared after fd: freed first
  std::deque<Chunk> queue;
  bool closing = false;        // Channel::Close() or Abort() was called
  bool aborted = false;        // Channel::Abort(): drop everything now
  bool want_writable = false;  // EPOLLOUT is registered (server thread only)
  Clock::time_point deadline;  // connect by (not connected), flush by (closing)
};

}  // namespace

class DataSocketServer::Core {
 public:
  Core(std::unique_ptr<EpollLoop> loop, std::unique_ptr<ReloadingTlsContext> tls)
      : loop_(std::move(loop)), tls_(std::move(tls)) {}

  // --- called from any thread -------------------------------------------
  void Register(uint64_t stream_id, const Secret& secret,
                std::function<void(absl::Status)> on_failure) {
    MutexLock lock(&mu_);
    if (stopped_) return;
    ChannelState& ch = channels_[stream_id];
    ch.secret = secret;
    ch.on_failure = std::move(on_failure);
    ch.deadline = Clock::now() + kConnectTimeout;
    Wake();  // the thread's next timeout may now be earlier
  }

  void Send(uint64_t stream_id, const uint8_t* data, size_t size,
            std::shared_ptr<const void> keep_alive) {
    MutexLock lock(&mu_);
    auto it = channels_.find(stream_id);
    if (stopped_ || it == channels_.end() || it->second.closing) return;  // dropped
    const bool was_empty = it->second.queue.empty();
    it->second.queue.push_back(Chunk{data, size, 0, std::move(keep_alive)});
    // A non-empty queue is being written already (or waits for the
    // connection, which flushes it).
    if (was_empty && it->second.fd.valid()) Wake();
  }

  void Close(uint64_t stream_id, bool abort) {
    MutexLock lock(&mu_);
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
    {
      MutexLock lock(&mu_);
      stopped_ = true;
    }
    loop_->Stop();
  }

  // --- the server's thread (and Start, before the thread exists) ---------
  absl::Status Arm(UniqueFd listen_fd) {
    absl::StatusOr<std::unique_ptr<HandshakeAcceptor>> acceptor = HandshakeAcceptor::Create(
        loop_.get(), std::move(listen_fd),
        HandshakeAcceptor::Options{.name = "data socket", .tls = tls_.get()},
        [this](UniqueFd conn, SslPtr tls, const HandshakeRequest& request) {
          Admit(std::move(conn), std::move(tls), request);
        });
    if (!acceptor.ok()) return acceptor.status();
    acceptor_ = *std::move(acceptor);
    return absl::OkStatus();
  }

  void Run() {
    const absl::Status st = loop_->Run(
        [this](uint64_t key, uint32_t events) {
          if (HandshakeAcceptor::Owns(key)) {
            acceptor_->OnEvent(key);
          } else if (TagOf(key) == EventTag::kConnection) {
            // Both may be set: a TLS record that is not yet whole leaves the
            // connection open, and its writes must go on meanwhile (Flush
            // does nothing for a connection that has just been closed).
            if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
              ConnectionReadable(ValueOf(key));
            }
            if (events & EPOLLOUT) Flush(ValueOf(key));
          }
        },
        [this](Clock::time_point now) { return Service(now); });
    if (!st.ok()) {
      spdlog::error("data socket: {}; the data socket stops serving", std::string(st.message()));
    }
    Shutdown();
  }

 private:
  void Wake() { loop_->Wake(); }

  void SetInterest(int fd, uint64_t stream_id, bool writable) {
    if (absl::Status st = loop_->Modify(fd, EPOLLIN | EPOLLRDHUP | (writable ? EPOLLOUT : 0u),
                                        EventKey(EventTag::kConnection, stream_id));
        !st.ok()) {
      spdlog::error("{}", std::string(st.message()));
    }
  }

  // A complete handshake (from the acceptor): the connection becomes its
  // stream's, or is refused.
  void Admit(UniqueFd conn, SslPtr tls, const HandshakeRequest& request) {
    const int fd = conn.get();
    const uint64_t stream_id = request.stream_id;
    bool accepted = false;
    {
      MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      static const Secret kNone{};
      // Compare against something either way, so an unknown id costs the same.
      // A closed stream's client may still connect: its batches are queued.
      const bool open = it != channels_.end() && !it->second.fd.valid() && !it->second.aborted;
      accepted = ConstantTimeEqual(open ? it->second.secret : kNone, request.secret) && open;
      if (accepted) {
        // A fresh connection's send buffer is empty: the byte always fits.
        if (absl::Status st = SendStatusByte(fd, tls.get(), kHandshakeAccepted); !st.ok()) {
          spdlog::warn("data socket: stream {}: cannot answer {}: {}", stream_id, PeerName(fd),
                       std::string(st.message()));
          return;  // the client retries or its stream times out
        }
        if (absl::Status st =
                loop_->Add(fd, EPOLLIN | EPOLLRDHUP, EventKey(EventTag::kConnection, stream_id));
            !st.ok()) {
          spdlog::warn("stream {}: {}", stream_id, std::string(st.message()));
          return;  // closes it: the client sees the connection end
        }
        it->second.fd = std::move(conn);
        it->second.tls = std::move(tls);
      }
    }
    if (!accepted) {
      spdlog::warn(
          "data socket: refused {} for stream {}: unknown stream, already connected, or "
          "wrong secret",
          PeerName(fd), stream_id);
      (void)SendStatusByte(fd, tls.get(), kHandshakeRefused);
      return;  // closes
    }
    spdlog::debug("data socket: stream {} connected from {}", stream_id, PeerName(fd));
    Flush(stream_id);
  }

  // The status byte after a handshake, in TLS when the connection has it.
  static absl::Status SendStatusByte(int fd, SSL* tls, uint8_t byte) {
    if (tls == nullptr) {
      if (::send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) return absl::OkStatus();
      return PosixError("send", errno);
    }
    ERR_clear_error();
    const int r = SSL_write(tls, &byte, 1);
    if (r == 1) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("SSL_write: error ", SSL_get_error(tls, r), " ", TakeOpenSslErrors()));
  }

  // The client sends nothing after its request: readable means closed (or a
  // protocol error, handled the same way). Under TLS, records that carry no
  // application data (a key update) are consumed and ignored.
  void ConnectionReadable(uint64_t stream_id) {
    int fd = -1;
    SSL* tls = nullptr;
    {
      MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      if (it == channels_.end() || !it->second.fd.valid()) return;
      fd = it->second.fd.get();
      tls = it->second.tls.get();  // only this thread frees it
    }
    char byte;
    ssize_t r;
    if (tls != nullptr) {
      ERR_clear_error();
      r = SSL_read(tls, &byte, 1);
      if (r <= 0) {
        const int e = SSL_get_error(tls, static_cast<int>(r));
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return;
        ERR_clear_error();
      }
    } else {
      r = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    }
    Fail(stream_id, absl::UnavailableError(
                        r > 0 ? "the client sent bytes on the data socket (it only receives)"
                              : "the client closed the data socket"));
  }

  // Writes what is queued for the stream until done or the socket is full.
  void Flush(uint64_t stream_id) {
    std::vector<std::shared_ptr<const void>> done;  // dropped outside the lock
    while (true) {
      int fd;
      SSL* tls;
      const uint8_t* p;
      size_t n;
      {
        MutexLock lock(&mu_);
        auto it = channels_.find(stream_id);
        if (it == channels_.end() || !it->second.fd.valid() || it->second.aborted) break;
        ChannelState& ch = it->second;
        if (ch.queue.empty()) {
          if (ch.want_writable) {
            ch.want_writable = false;
            SetInterest(ch.fd.get(), stream_id, false);
          }
          // A closed channel is done now: its end is up to Service(), which
          // may have looked before this flush emptied the queue (then it
          // would wait for the drain deadline). Wake it for another look.
          if (ch.closing) Wake();
          break;
        }
        const Chunk& c = ch.queue.front();
        fd = ch.fd.get();
        tls = ch.tls.get();
        p = c.data + c.sent;
        n = c.size - c.sent;
      }
      // Outside the lock: a send of megabytes takes a while, and Send()
      // callers (engine and gRPC threads) must not wait for it. Only this
      // thread removes chunks or connections, so `p` stays valid.
      ssize_t r;
      bool would_block = false;
      if (tls != nullptr) {
        // Partial writes are on (tls_context.h): a retry after WANT_WRITE
        // passes the same bytes, from where the last write stopped.
        ERR_clear_error();
        const int w =
            n == 0 ? 0 : SSL_write(tls, p, static_cast<int>(std::min<size_t>(n, INT_MAX)));
        r = w;
        if (w <= 0 && n != 0) {
          const int e = SSL_get_error(tls, w);
          if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
            would_block = true;
          } else {
            std::string why = TakeOpenSslErrors();
            Fail(stream_id, absl::UnavailableError(
                                absl::StrCat("writing to the data socket over TLS failed: ",
                                             why.empty() ? absl::StrCat("SSL error ", e) : why)));
            break;
          }
        }
      } else {
        r = n == 0 ? 0 : ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR) continue;
        would_block = r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
      if (would_block) {
        MutexLock lock(&mu_);
        auto it = channels_.find(stream_id);
        if (it != channels_.end() && !it->second.want_writable) {
          it->second.want_writable = true;
          SetInterest(fd, stream_id, true);
        }
        break;
      }
      if (r < 0) {
        Fail(stream_id, absl::UnavailableError(std::string(
                            PosixError("writing to the data socket failed", errno).message())));
        break;
      }
      MutexLock lock(&mu_);
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
      MutexLock lock(&mu_);
      auto it = channels_.find(stream_id);
      if (it == channels_.end()) return;
      if (!it->second.closing) notify = std::move(it->second.on_failure);
      gone.emplace(std::move(it->second));
      channels_.erase(it);
    }
    spdlog::info("data socket: stream {}: {}", stream_id, std::string(why.message()));
    if (notify) notify(std::move(why));
  }

  // Flushes connected channels, ends closed ones, enforces the deadlines;
  // returns the next deadline (nullopt: none).
  std::optional<Clock::time_point> Service(Clock::time_point now) {
    std::vector<uint64_t> to_flush;
    std::vector<std::pair<uint64_t, absl::Status>> to_fail;
    std::vector<ChannelState> finished;  // destroyed outside the lock
    {
      MutexLock lock(&mu_);
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
              spdlog::warn(
                  "data socket: stream {}: {} batch(es) still unread {} s after the "
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
          to_fail.emplace_back(
              it->first, absl::FailedPreconditionError(
                             absl::StrCat("the client did not connect its data socket within ",
                                          std::chrono::seconds(kConnectTimeout).count(), " s")));
        } else if (connected && !ch.queue.empty() && !ch.want_writable) {
          to_flush.push_back(it->first);
        }
        ++it;
      }
    }
    for (auto& [id, why] : to_fail) Fail(id, std::move(why));
    for (uint64_t id : to_flush) Flush(id);
    std::optional<Clock::time_point> next = acceptor_->Tick(now);
    {
      MutexLock lock(&mu_);
      for (const auto& [id, ch] : channels_) {
        if ((!ch.fd.valid() || ch.closing) && (!next || ch.deadline < *next)) next = ch.deadline;
      }
    }
    return next;
  }

  void Shutdown() {
    std::map<uint64_t, ChannelState> gone;
    {
      MutexLock lock(&mu_);
      stopped_ = true;
      gone.swap(channels_);
    }
    acceptor_.reset();  // closes the listening socket and pending handshakes
  }

  // Woken when the channels changed; stopped by RequestStop().
  const std::unique_ptr<EpollLoop> loop_;
  const std::unique_ptr<ReloadingTlsContext> tls_;  // listen.tls; null: plaintext

  Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, ChannelState> channels_ ABSL_GUARDED_BY(mu_);

  // Set by Arm before the thread starts; the server's thread's only.
  std::unique_ptr<HandshakeAcceptor> acceptor_;
};

DataSocketServer::Channel::~Channel() { Close(); }

void DataSocketServer::Channel::Send(const uint8_t* data, size_t size,
                                     std::shared_ptr<const void> keep_alive) {
  core_->Send(stream_id_, data, size, std::move(keep_alive));
}

void DataSocketServer::Channel::Close() { core_->Close(stream_id_, /*abort=*/false); }

void DataSocketServer::Channel::Abort() { core_->Close(stream_id_, /*abort=*/true); }

absl::StatusOr<std::unique_ptr<DataSocketServer>> DataSocketServer::Start(
    const std::string& host_port, const TlsConfig* tls) {
  std::unique_ptr<ReloadingTlsContext> tls_context;
  if (tls != nullptr && tls->enabled()) {
    absl::StatusOr<std::unique_ptr<ReloadingTlsContext>> made = ReloadingTlsContext::Create(*tls);
    if (!made.ok()) return made.status();
    tls_context = *std::move(made);
  }
  absl::StatusOr<ListenSockets> bound =
      BindListenSockets(host_port, "data socket", BindAddresses::kFirstAddress, /*backlog=*/64);
  if (!bound.ok()) return bound.status();
  UniqueFd listen_fd = std::move(bound->fds.front());
  const int bound_port = bound->port;
  absl::StatusOr<std::unique_ptr<EpollLoop>> loop = EpollLoop::Create("data socket");
  if (!loop.ok()) return loop.status();
  auto core = std::make_shared<Core>(*std::move(loop), std::move(tls_context));
  if (absl::Status st = core->Arm(std::move(listen_fd)); !st.ok()) return st;
  std::unique_ptr<DataSocketServer> server(new DataSocketServer(core, bound_port));
  server->thread_ = std::thread([core] { core->Run(); });
  pthread_setname_np(server->thread_.native_handle(), "conveyor-data");
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
