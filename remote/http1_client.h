// Http1Client: the remote reader's own client for plain http:// GETs, run on
// the reader's I/O thread and epoll (CurlEpollDriver). Keep-alive
// connections are pooled per server address, a request head goes out in one
// send, and an answer's body is received straight into the caller's buffer:
// no copy through a library's receive buffer and no per-request setup (for
// ~100 KiB images over loopback, 45% less CPU on the I/O thread than
// libcurl: bench/README.md). A run of byte ranges (a tar shard's members)
// is received with one recvmsg into many destinations.
//
// It handles what a static object server sends (HTTP/1.0 or 1.1 answers
// with a Content-Length); a 206 must name the range asked in its
// Content-Range, else the transfer fails (kFailed, the body unread).
// Anything else (chunked or unsized bodies, 1xx, a 200 to a Range request,
// an answer that is not HTTP) ends the transfer as kUnsupported, unread,
// so the caller can send the request through libcurl,
// which stays the client for TLS, S3 signing, proxies and HEAD. A request
// sent on a reused connection the server had closed meanwhile (nothing of
// the answer came back) is sent again on a new connection, once per reused
// connection, without counting as a failure.
//
// Thread-safety: none. Every method, and the destructor, belongs to the
// thread that drives the CurlEpollDriver it was given.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "remote/curl_epoll_driver.h"

namespace conveyor::remote {

// One GET. The caller fills the inputs, passes it to Start, and keeps it
// alive (at the same address) until TakeFinished hands it back or the
// client is destroyed.
struct Http1Get {
  // Inputs.
  sockaddr_storage address{};  // the server (the address libcurl reached it at)
  socklen_t address_len = 0;
  std::string pool;          // connection pool key: the address as text
  std::string head;          // the request head, ending with an empty line
  bool range_asked = false;  // a 200 (range ignored) is then kUnsupported
  // range_asked: the range's first byte and length, and the object's size
  // when known (0: not). A 206 whose Content-Range names another range (or
  // another size) is kFailed, unread: a cut answer (ContentRangeMismatch).
  uint64_t range_offset = 0;
  uint64_t range_length = 0;
  uint64_t object_size = 0;
  uint64_t max_body = 0;  // a 2xx body longer than this is kTooLarge, unread
  // Where a 2xx body goes. With no pieces, all of it into *body (resized to
  // the announced length). Else piece after piece, in order: the bytes of a
  // piece with a destination go there (resized to the bytes of the piece
  // the answer holds, so a short answer leaves later pieces short or
  // empty), those of a piece without one are dropped (the gaps between a
  // run's parts). Destinations start empty.
  struct Piece {
    std::vector<uint8_t>* to = nullptr;
    uint64_t length = 0;
  };
  std::vector<uint8_t>* body = nullptr;
  std::vector<Piece> pieces;
  uint64_t connect_deadline_ns = 0;  // MonotonicNanos
  uint64_t deadline_ns = 0;

  // Outputs, valid once finished.
  enum class Result {
    kOk,           // an answer: `status`, a 2xx body in *body, else error_body
    kFailed,       // no whole answer (refused, reset, cut): worth a retry
    kTimedOut,     // a deadline passed: worth a retry
    kUnsupported,  // an answer left to libcurl: send the request there
    kTooLarge,     // a 2xx body longer than max_body (status and content_length set)
  };
  Result result = Result::kOk;
  int status = 0;
  uint64_t content_length = 0;
  std::string error;                // kFailed / kTimedOut / kUnsupported: what happened
  std::vector<uint8_t> error_body;  // a non-2xx answer's body, its first 4 KiB
};

class Http1Client final : public CurlEpollDriver::SocketHandler {
 public:
  // Registers with `driver` (which must outlive the client). At most
  // `max_idle_per_pool` idle connections are kept per address.
  Http1Client(CurlEpollDriver* driver, size_t max_idle_per_pool);
  // Closes every connection; transfers in flight are dropped unreported.
  ~Http1Client();
  Http1Client(const Http1Client&) = delete;
  Http1Client& operator=(const Http1Client&) = delete;

  // Starts `get` on an idle connection to its address, else a new one.
  void Start(Http1Get* get);
  // Ends transfers whose deadline is past `now_ns` as kTimedOut.
  void ExpireDeadlines(uint64_t now_ns);
  // The earliest deadline of the transfers in flight (UINT64_MAX: none).
  uint64_t NextDeadline() const { return next_deadline_ns_; }
  // Moves the transfers finished since the last call into *out (appended).
  void TakeFinished(std::vector<Http1Get*>* out);

  void OnSocketReady(int fd, uint32_t epoll_events) override;

 private:
  struct Connection;
  void Connect(Http1Get* get);
  void Send(Connection* c);
  void ReadHead(Connection* c);
  // Lays out a 2xx body of c->length bytes over its destinations.
  void PlanBody(Connection* c);
  // Hands the next `n` body bytes (already received, at `data`) to their piece(s).
  void Deliver(Connection* c, const char* data, size_t n);
  // Moves the body cursor `n` bytes on (bytes received in place).
  void Advance(Connection* c, uint64_t n);
  void ReadBody(Connection* c);
  // What a body recv's result `n` asks for: take the bytes, recv again
  // (EINTR), wait for epoll (EAGAIN), or nothing more: the transfer failed
  // (the server closed or reset the connection) and `c` is gone.
  enum class BodyRecv { kBytes, kAgain, kWait, kEnded };
  BodyRecv CheckBodyRecv(Connection* c, ssize_t n);
  void ReadErrorBody(Connection* c);
  // A request on a reused connection that the server had closed: again on a
  // new connection. False when the connection was new (a real failure).
  bool RetryIfStale(Connection* c);
  void Fail(Connection* c, Http1Get::Result result, std::string error);
  void Done(Connection* c, bool reusable);
  void Close(Connection* c);
  void Track(const Http1Get* get);

  CurlEpollDriver* const driver_;
  const size_t max_idle_per_pool_;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;  // by socket
  std::unordered_map<std::string, std::vector<Connection*>> idle_;    // by pool
  std::vector<Http1Get*> finished_;
  uint64_t next_deadline_ns_ = UINT64_MAX;
  std::vector<char> scratch_;  // bytes received to be dropped (gaps, error bodies)
};

}  // namespace conveyor::remote
