// Helpers for the tests of the daemon's socket servers (fd hand-over, data
// socket): the 40-byte handshake from the client's side, the fd hand-over
// reply, the CPU time of one thread of this process, and running the
// process out of file descriptors for a while (FdExhaustion).
//
// Thread-safety: free functions and single-owner objects for the test's main
// thread (FdExhaustion changes the process's fd limit).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/unique_fd.h"

namespace conveyor::testing {

// The 40 request bytes: stream id (8 bytes little-endian), then the secret.
template <typename SecretT>
std::vector<uint8_t> HandshakeBytes(uint64_t stream_id, const SecretT& secret) {
  std::vector<uint8_t> req(8 + secret.size());
  for (int i = 0; i < 8; ++i) req[i] = static_cast<uint8_t>(stream_id >> (8 * i));
  std::memcpy(req.data() + 8, secret.data(), secret.size());
  return req;
}

// Notification: one thread says something happened, another waits for it
// with a deadline. On std::mutex, so that ThreadSanitizer sees the
// hand-off (absl::Notification is opaque to it in Debian's abseil).
class Notification {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      notified_ = true;
    }
    cv_.notify_all();
  }
  // True once notified; false if `timeout` passed first.
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return notified_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool notified_ = false;
};

// Sets a receive timeout so that a test that would hang fails instead.
inline void SetRecvTimeout(int fd, int seconds) {
  const timeval timeout{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
}

// Connects a unix stream socket to `path` (blocking); invalid on failure.
inline UniqueFd ConnectUnix(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  SetRecvTimeout(fd.get(), 10);
  return fd;
}

// Connects a TCP socket to `port` on 127.0.0.1 (blocking), with a receive
// timeout; invalid on failure.
inline UniqueFd ConnectLoopbackTcp(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return fd;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return UniqueFd();
  SetRecvTimeout(fd.get(), 10);
  return fd;
}

// The fd hand-over reply: the status byte (-1 when the server closed the
// connection first) and the fd that came with it (invalid if none).
struct HandOverReply {
  int status = -1;
  UniqueFd fd;
};

inline HandOverReply ReadHandOverReply(int conn) {
  HandOverReply reply;
  uint8_t status = 0;
  iovec iov{&status, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t r = ::recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
  if (r != 1) return reply;
  reply.status = status;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
      reply.fd.Reset(fd);
    }
  }
  return reply;
}

// Sends the handshake on a connected fd-socket connection and reads the reply.
template <typename SecretT>
HandOverReply RequestRegion(int conn, uint64_t stream_id, const SecretT& secret) {
  const std::vector<uint8_t> req = HandshakeBytes(stream_id, secret);
  if (::send(conn, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    return HandOverReply{};
  }
  return ReadHandOverReply(conn);
}

// Whether the peer has closed `fd` (EOF is readable now); false while the
// connection is open and quiet.
inline bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  char b;
  return ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0 || (p.revents & (POLLHUP | POLLERR));
}

// The ids of this process's threads.
inline std::set<pid_t> ThreadIds() {
  std::set<pid_t> ids;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return ids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ids.insert(static_cast<pid_t>(std::stol(e->d_name)));
  }
  ::closedir(d);
  return ids;
}

// The threads that exist now but not in `before`.
inline std::vector<pid_t> NewThreads(const std::set<pid_t>& before) {
  std::vector<pid_t> out;
  for (pid_t t : ThreadIds()) {
    if (before.count(t) == 0) out.push_back(t);
  }
  return out;
}

// The thread that exists now but not in `before` and is named `name`
// (/proc/self/task/TID/comm), or -1. By name, because a sanitizer runtime may
// start threads of its own at any time.
inline pid_t NewThreadNamed(const std::set<pid_t>& before, const std::string& name) {
  for (pid_t t : NewThreads(before)) {
    std::ifstream comm("/proc/self/task/" + std::to_string(t) + "/comm");
    std::string got;
    if (std::getline(comm, got) && got == name) return t;
  }
  return -1;
}

// User + system CPU time of thread `tid` of this process, in clock ticks
// (fields 14 and 15 of /proc/self/task/TID/stat). The file is opened once,
// up front, so that reading it needs no new fd (it is read while the
// process has none left).
class ThreadCpuClock {
 public:
  explicit ThreadCpuClock(pid_t tid)
      : fd_(::open(("/proc/self/task/" + std::to_string(tid) + "/stat").c_str(),
                   O_RDONLY | O_CLOEXEC)) {}
  bool valid() const { return fd_.valid(); }

  // -1 when the thread is gone or the file unreadable.
  long Ticks() const {
    char buf[1024];
    const ssize_t n = ::pread(fd_.get(), buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    const std::string text(buf, static_cast<size_t>(n));
    const size_t close = text.rfind(')');  // the name may hold spaces
    if (close == std::string::npos) return -1;
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stol(field);
      if (i == 15) stime = std::stol(field);
    }
    return utime + stime;
  }

 private:
  UniqueFd fd_;
};

// Runs the process out of file descriptors: lowers the soft RLIMIT_NOFILE
// to a little above the highest fd in use and opens descriptors until the
// kernel says EMFILE. Release() (or the destructor) closes them and restores
// the limit.
class FdExhaustion {
 public:
  FdExhaustion() {
    ::getrlimit(RLIMIT_NOFILE, &saved_);
    int highest = 2;
    for (int fd = 0; fd < 65536 && fd < static_cast<int>(saved_.rlim_cur); ++fd) {
      if (::fcntl(fd, F_GETFD) >= 0) highest = fd;
    }
    rlimit lower = saved_;
    lower.rlim_cur = static_cast<rlim_t>(highest + 17);
    ok_ = ::setrlimit(RLIMIT_NOFILE, &lower) == 0;
    while (ok_) {
      UniqueFd fd(::dup(0));
      if (!fd) {
        ok_ = errno == EMFILE;
        break;
      }
      held_.push_back(std::move(fd));
    }
  }
  ~FdExhaustion() { Release(); }
  FdExhaustion(const FdExhaustion&) = delete;
  FdExhaustion& operator=(const FdExhaustion&) = delete;

  // Whether the process is out of fds now.
  bool ok() const { return ok_; }

  void Release() {
    held_.clear();
    ::setrlimit(RLIMIT_NOFILE, &saved_);
  }

 private:
  rlimit saved_{};
  bool ok_ = false;
  std::vector<UniqueFd> held_;
};

// The CPU ticks thread `server_thread` burns over one second while this
// process has no fd left and `conn` (made beforehand) connects to `addr`: a
// server that retries a failing accept() in a loop burns the whole second,
// one that backs off next to nothing. -1 if the fds could not be exhausted
// or the connect failed. The fds are free again on return.
inline long CpuTicksWhileOutOfFds(pid_t server_thread, int conn, const sockaddr* addr,
                                  socklen_t addr_len) {
  const ThreadCpuClock cpu(server_thread);
  if (!cpu.valid()) return -1;
  FdExhaustion exhausted;
  if (!exhausted.ok() || ::connect(conn, addr, addr_len) != 0) return -1;
  const long before = cpu.Ticks();
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the measured window
  return cpu.Ticks() - before;
}

}  // namespace conveyor::testing
