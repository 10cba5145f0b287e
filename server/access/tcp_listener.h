// TcpListener: the daemon's gRPC TCP port (listen.tcp), accepted by the
// daemon itself so that connections which have not yet said a word cannot
// take the process's file descriptors.
//
// Why not gRPC's own TCP listener: gRPC 1.51 accepts every connection and
// holds it for its server handshake timeout (120 s by default) before any
// TLS or token check, with no cap on how many may wait, per peer or in all
// (it has no max-connections channel argument; its resource quota bounds
// memory and threads, not connections or fds). 1,100 silent connections
// took a daemon to its fd limit: sample reads failed "Too many open files".
// So the daemon binds the port, accepts on its own thread, and keeps each
// new connection "pending" until its client's first message is complete —
// the HTTP/2 connection preface and the frame after it (plaintext) or the
// whole first TLS record (the ClientHello) — and only then hands it to the
// running gRPC server through gRPC's external connection acceptor
// (ServerBuilder::experimental().AddExternalConnectionAcceptor, which, unlike
// grpc::AddInsecureChannelFromFd, runs the TLS handshake of the server's
// credentials). gRPC's shortened server handshake timeout
// (GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, set by the daemon) bounds the rest
// of the handshake after that.
//
// Pending connections are bounded: at most `max_pending_per_peer` from one
// peer address and `max_pending` in all (a new one evicts the oldest pending
// one of its peer, or of all), each for at most `pending_timeout`. Evicting
// the oldest rather than refusing the newest keeps the port open to real
// clients, which send their first message at once, while a flood churns
// through its own connections.
//
// The fd reserve: past a high-water mark of open fds (RLIMIT_NOFILE minus a
// reserve kept for sample reads, shards and the side sockets), a new
// connection evicts the oldest pending one, or, with none pending, is closed
// at once: accepts then "fail for lack of fds", and `on_fd_pressure(true)`
// is called (the daemon sets health NOT_SERVING) until the open fds are
// some way below the mark again (max(8, mark / 32) fds, so that health does
// not flap at the mark; `on_fd_pressure(false)`). accept() itself
// failing (EMFILE, ENFILE) counts the same, with LoopListener's backoff.
//
// With `admits_local_uid` set, a connection made from this host is handed
// over only if the uid owning its other end is admitted (LocalPeerUid): the
// daemon applies the unix socket's allowed_uids / allowed_gids, so that
// tokenless loopback TCP is no way around them.
//
// Every connection closed by these rules is counted by reason
// (MetricsText(): conveyor_tcp_connections_refused_total{reason}) and logged
// once per reason and minute with the count since the last line.
//
// Thread-safety: Stop() and the destructor may be called from any thread;
// MetricsText() from any thread (atomics); the callbacks run on the
// listener's thread.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/base/epoll_loop.h"
#include "core/base/loop_listener.h"
#include "core/base/unique_fd.h"

namespace conveyor::server {

// The uid owning the other end of TCP connection `fd` when that end is a
// socket of this host's network namespace (/proc/net/tcp, tcp6); nullopt
// for a peer elsewhere (or when it cannot be told).
std::optional<uid_t> LocalPeerUid(int fd);

// Whether `bytes` (the first bytes a client sent) hold its complete first
// message: with `tls`, one whole TLS record; without, the 24-byte HTTP/2
// connection preface and the complete frame after it (its SETTINGS).
enum class FirstMessage { kIncomplete, kComplete, kMalformed };
FirstMessage CheckFirstMessage(absl::Span<const uint8_t> bytes, bool tls);

// How many bytes CheckFirstMessage may need to see at most.
inline constexpr size_t kMaxFirstMessageBytes = 5 + (16 << 10) + 2048;

// The open-fd high-water mark of a process whose RLIMIT_NOFILE is `limit`
// with `threads` workers: `limit` less a reserve of max(32, limit / 8,
// 2 × threads + 16) fds, never below a quarter of the limit.
int FdHighWaterMark(int limit, int threads);

// Why a TCP connection was closed before it reached gRPC.
enum class TcpRefusal : int {
  kPeerPendingCap = 0,  // evicted: its peer had max_pending_per_peer pending
  kPendingCap,          // evicted: max_pending were pending
  kFdReserve,           // evicted or refused: open fds at the high-water mark
  kAcceptFailed,        // accept() failed (out of fds): counted per attempt
  kPendingTimeout,      // its first message did not come in time
  kMalformed,           // its first bytes were neither HTTP/2 nor TLS
  kLocalUidRefused,     // a local user's connection that admits_local_uid refused
  kCount
};
const char* TcpRefusalName(TcpRefusal reason);

// The bookkeeping of pending connections: which to evict for a new one.
// Pure policy (no fds closed here), so unit tests drive it directly.
// Thread-safety: not thread-safe; the listener's thread's.
class PendingConnections {
 public:
  using Clock = std::chrono::steady_clock;
  PendingConnections(size_t max_per_peer, size_t max_total)
      : max_per_peer_(max_per_peer), max_total_(max_total) {}

  // The pending connection to evict before `peer` may add one (and why),
  // or -1 when there is room.
  struct Eviction {
    int fd = -1;
    TcpRefusal reason = TcpRefusal::kPendingCap;
  };
  Eviction ToEvictFor(const std::string& peer) const;
  // The oldest pending connection (-1: none).
  int Oldest() const;

  // REQUIRES: ToEvictFor(peer).fd == -1 (room), `fd` not already pending.
  void Add(int fd, const std::string& peer, Clock::time_point deadline);
  // No-op for an fd that is not pending.
  void Remove(int fd);
  bool Contains(int fd) const { return by_fd_.count(fd) != 0; }
  // The pending connections whose deadline is at or before `now`.
  std::vector<int> Expired(Clock::time_point now) const;
  // The earliest deadline (nullopt: none pending).
  std::optional<Clock::time_point> NextDeadline() const;

  size_t size() const { return by_fd_.size(); }
  size_t PendingOf(const std::string& peer) const;

 private:
  struct Entry {
    std::string peer;
    Clock::time_point deadline;
    uint64_t seq;
  };
  const size_t max_per_peer_;
  const size_t max_total_;
  uint64_t next_seq_ = 0;
  std::map<int, Entry> by_fd_;
  std::map<uint64_t, int> by_age_;                          // seq → fd, oldest first
  std::map<std::string, std::map<uint64_t, int>> by_peer_;  // peer → seq → fd
};

class TcpListener {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    bool tls = false;  // the port speaks TLS (what the first message is)
    size_t max_pending_per_peer = 64;
    size_t max_pending = 256;
    Clock::duration pending_timeout = std::chrono::seconds(10);
    // Open fds past which new connections are refused (FdHighWaterMark).
    int fd_high_water = 0;
    // When set: a connection made from this host (its other end is a
    // socket of this network namespace, found in /proc/net/tcp{,6}) is
    // handed over only if this admits the uid owning that socket. The
    // daemon sets it to the unix socket's allowed_uids / allowed_gids when
    // TCP asks for no token, so that loopback TCP is no way around them.
    std::function<bool(uid_t uid)> admits_local_uid;
  };
  // Takes a connection whose first message is complete (the bytes are
  // still in the socket: only peeked at), accepted on `listen_fd`.
  using OnAccept = std::function<void(UniqueFd conn, int listen_fd)>;
  // Accepts started (true) or stopped (false) failing for lack of fds.
  using OnFdPressure = std::function<void(bool short_of_fds)>;

  // Binds `host_port` ("host:port", "[v6]:port"; port 0: a free one) on
  // every address of the host (localhost: ::1 and 127.0.0.1, one port) and
  // starts accepting. UnavailableError when it can bind none.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Start(const std::string& host_port,
                                                            Options options, OnAccept on_accept,
                                                            OnFdPressure on_fd_pressure);
  ~TcpListener();  // Stop()
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // Stops accepting and closes the pending connections. Connections handed
  // to gRPC stay gRPC's. Idempotent; Stop()'s caller only.
  void Stop();

  int port() const { return port_; }

  // Prometheus text: conveyor_tcp_connections_refused_total{reason},
  // conveyor_tcp_connections_pending, conveyor_tcp_accepting_short_of_fds,
  // conveyor_open_fds, conveyor_fd_high_water_mark.
  std::string MetricsText() const;

 private:
  TcpListener(int port, std::unique_ptr<EpollLoop> loop, Options options, OnAccept on_accept,
              OnFdPressure on_fd_pressure);
  void Run();
  std::optional<Clock::time_point> Tick(Clock::time_point now);
  void Take(UniqueFd conn, int listen_fd);
  // Hands `fd` over once its first message is complete; `hung_up`: its
  // client closed its side (what it sent is all there will be).
  void Peek(int fd, bool hung_up);
  // Closes pending connection `fd`, counted under `reason`.
  void Drop(int fd, TcpRefusal reason);
  void Count(TcpRefusal reason);
  // accept() failed (and the listener pauses).
  void AcceptFailed();
  // Open fds below which a listener short of fds is no longer (the
  // high-water mark less some slack).
  int FdResumeMark() const;
  void SetPressure(bool short_of_fds);
  // The process's open fds (recounted at most every few ms; an estimate
  // between recounts).
  int OpenFds(Clock::time_point now);

  const int port_;
  const std::unique_ptr<EpollLoop> loop_;
  const Options options_;
  const OnAccept on_accept_;
  const OnFdPressure on_fd_pressure_;

  // The listener's thread's (set by Start before it starts).
  std::vector<std::unique_ptr<LoopListener>> listeners_;  // one per address
  struct Held {
    UniqueFd fd;
    int listen_fd;  // the listening socket that accepted it (not owned)
  };
  std::map<int, Held> fds_;  // the pending connections

  PendingConnections pending_;
  bool short_of_fds_ = false;
  uid_t refused_uid_ = 0;  // the last kLocalUidRefused's, for its log line
  int fd_estimate_ = 0;
  Clock::time_point fd_counted_at_{};
  std::vector<uint8_t> peek_buffer_;
  struct LogState {
    Clock::time_point last_logged{};
    uint64_t unlogged = 0;
    bool ever = false;
  };
  std::array<LogState, static_cast<size_t>(TcpRefusal::kCount)> log_{};

  // Read by MetricsText from any thread.
  std::array<std::atomic<uint64_t>, static_cast<size_t>(TcpRefusal::kCount)> refused_{};
  std::atomic<uint64_t> pending_count_{0};
  std::atomic<int> open_fds_{0};
  std::atomic<bool> short_of_fds_metric_{false};

  std::thread thread_;
  bool stopped_ = false;  // Stop()'s caller only
};

}  // namespace conveyor::server
