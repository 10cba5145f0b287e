// CurlEpollDriver: runs a libcurl multi handle through libcurl's socket
// interface (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION and
// curl_multi_socket_action) on an epoll instance, so that each wake costs in
// proportion to the sockets that are ready, not to every transfer in flight
// (curl_multi_poll + curl_multi_perform walk all of them on every wake: with
// a hundred transfers waiting on a slow server, that was most of the reading
// thread's CPU). An eventfd lets other threads wake the wait.
//
// Thread-safety: Wake may be called from any thread at any time. Every other
// method belongs to the one thread that drives the multi handle (the reader's
// I/O thread), as the multi handle itself does.
#pragma once

#include <cstdint>
#include <memory>

#include <curl/curl.h>

#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"

namespace conveyor::remote {

class CurlEpollDriver {
 public:
  // Told of the readiness of sockets added with Watch (not libcurl's).
  class SocketHandler {
   public:
    // `epoll_events`: EPOLLIN / EPOLLOUT / EPOLLERR / EPOLLHUP as epoll
    // reported them. May be stale (the socket was closed and its number
    // reused within one Drive): handlers check before they act.
    virtual void OnSocketReady(int fd, uint32_t epoll_events) = 0;

   protected:
    ~SocketHandler() = default;
  };

  // Installs the socket and timer callbacks on `multi` (which must outlive
  // the driver and have no transfers yet). Internal naming the failing call
  // when epoll or the eventfd cannot be made or libcurl refuses a callback.
  static absl::StatusOr<std::unique_ptr<CurlEpollDriver>> Create(CURLM* multi);
  ~CurlEpollDriver();
  CurlEpollDriver(const CurlEpollDriver&) = delete;
  CurlEpollDriver& operator=(const CurlEpollDriver&) = delete;

  // Makes the current (or next) Drive return at once. Any thread.
  void Wake() const;

  // Waits until a socket libcurl watches is ready, libcurl's timer is due,
  // Wake is called, or `deadline_ns` (MonotonicNanos) passes — whichever is
  // first — and lets libcurl act on what happened. Transfers that finished
  // are then in curl_multi_info_read. Call after adding handles too: their
  // start is driven by libcurl's timer.
  void Drive(uint64_t deadline_ns);

  // Sleeps until `until_ns` (MonotonicNanos) or a Wake, whichever is first,
  // without looking at the sockets (so that more of them are ready, to be
  // served by one Drive). The wake is left for Drive to consume.
  void Pause(uint64_t until_ns) const;

  // Where Drive reports the sockets added with Watch (null: nowhere).
  void SetSocketHandler(SocketHandler* handler) { handler_ = handler; }
  // Watches one of the handler's sockets for `epoll_events` (level-triggered);
  // `added` says whether it is watched already (then its events change).
  // False with errno set when epoll refuses. Closing the socket unwatches it.
  bool Watch(int fd, uint32_t epoll_events, bool added);

 private:
  CurlEpollDriver(CURLM* multi, UniqueFd epoll, UniqueFd wake);
  static int OnSocket(CURL* easy, curl_socket_t s, int what, void* self, void* socket_data);
  static int OnTimer(CURLM* multi, long timeout_ms, void* self);
  // Logs the first failure of curl_multi_socket_action that is not a stale socket.
  void Report(CURLMcode code);

  CURLM* const multi_;
  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd
  // libcurl's timer: when it wants curl_multi_socket_action(CURL_SOCKET_TIMEOUT); 0 = none.
  uint64_t timer_due_ns_ = 0;
  bool timer_set_ = false;
  SocketHandler* handler_ = nullptr;
  bool reported_ = false;
};

}  // namespace conveyor::remote
