// Fuzz target: bytes as a server's answer to the remote reader's direct
// HTTP/1.1 client (remote/http1_client.h), over a real TCP connection on
// loopback, driven by a real CurlEpollDriver: the client sends a GET, the
// "server" (this target, on the same thread) reads it and writes the input
// in pieces, then closes the connection or keeps it open; then a second GET
// on the same client is answered with a fixed valid answer (on a reused
// connection when the first left one idle).
//
// Input: byte 0 is the plan (bit 0: the server closes after sending; bit 1:
// the body goes into a run's pieces, not one buffer; bits 2-3: max_body 0,
// 100, 4096 or 1 MiB; bits 4-7 seed the piece sizes, 1..61 bytes); the rest
// (at most 64 KiB) is the answer.
// Properties: no sanitizer report; each GET finishes exactly once, within
// its deadline; a kOk 2xx answer's body is exactly Content-Length bytes,
// at most max_body, spread over the pieces in order; a non-2xx answer keeps
// at most 4 KiB of its body; a failure says why; the second GET succeeds
// byte for byte.
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <curl/curl.h>

#include "core/base/unique_fd.h"
#include "core/engine/stats.h"
#include "remote/curl_epoll_driver.h"
#include "remote/curl_handles.h"
#include "remote/http1_client.h"
#include "tests/fuzz/fuzz_target.h"

namespace conveyor::fuzz {
namespace {

using remote::Http1Get;

constexpr size_t kMaxAnswer = 64 << 10;
constexpr uint64_t kMaxBodies[] = {0, 100, 4096, 1 << 20};

struct Server {
  UniqueFd listener;
  sockaddr_in addr{};
  UniqueFd conn;
  std::string request;  // bytes received on conn
};

Server Listen() {
  Server s;
  s.listener.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  FUZZ_CHECK(s.listener.valid());
  s.addr.sin_family = AF_INET;
  s.addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(::bind(s.listener.get(), reinterpret_cast<sockaddr*>(&s.addr), sizeof s.addr) == 0);
  socklen_t len = sizeof s.addr;
  FUZZ_CHECK(::getsockname(s.listener.get(), reinterpret_cast<sockaddr*>(&s.addr), &len) == 0);
  FUZZ_CHECK(::listen(s.listener.get(), 8) == 0);
  return s;
}

// Accepts a pending connection (replacing the current one) and reads what
// the client sent; true once a whole request head is in.
bool ServeRequest(Server* s) {
  if (int fd = ::accept4(s->listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      fd >= 0) {
    s->conn.Reset(fd);
    s->request.clear();
  }
  if (!s->conn.valid()) return false;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(s->conn.get(), buf, sizeof buf, 0)) > 0)
    s->request.append(buf, static_cast<size_t>(n));
  return s->request.find("\r\n\r\n") != std::string::npos;
}

// Drives the client until `get` finished (true) or the clock passes `until_ns`.
bool DriveUntilDone(remote::CurlEpollDriver* driver, remote::Http1Client* client, Http1Get* get,
                    uint64_t until_ns, const std::function<void()>& serve) {
  std::vector<Http1Get*> done;
  while (MonotonicNanos() < until_ns) {
    serve();
    driver->Drive(MonotonicNanos() + 2'000'000);
    client->ExpireDeadlines(MonotonicNanos());
    client->TakeFinished(&done);
    if (!done.empty()) {
      FUZZ_CHECK(done.size() == 1 && done[0] == get);  // once, and the one asked
      return true;
    }
  }
  return false;
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  using namespace conveyor::fuzz;
  if (size < 1 || size > kMaxAnswer + 1) return 0;
  const uint8_t plan = data[0];
  const bool close_after = (plan & 1) != 0;
  const bool in_pieces = (plan & 2) != 0;
  const uint64_t max_body = kMaxBodies[(plan >> 2) & 3];
  const std::string answer(reinterpret_cast<const char*>(data + 1), size - 1);

  remote::UniqueCurlMulti multi(curl_multi_init());
  FUZZ_CHECK(multi != nullptr);
  {
    auto driver = remote::CurlEpollDriver::Create(multi.get());
    FUZZ_CHECK(driver.ok());
    remote::Http1Client client(driver->get(), 4);
    Server server = Listen();

    std::vector<uint8_t> body, a, b;
    Http1Get get;
    std::memcpy(&get.address, &server.addr, sizeof server.addr);
    get.address_len = sizeof server.addr;
    get.pool = "fuzz";
    get.head = "GET /o HTTP/1.1\r\nHost: fuzz\r\n\r\n";
    get.max_body = max_body;
    get.body = &body;
    if (in_pieces) get.pieces = {{&a, 7}, {nullptr, 5}, {&b, max_body}};
    const uint64_t start = MonotonicNanos();
    get.connect_deadline_ns = start + 300'000'000;
    get.deadline_ns = start + 300'000'000;  // an answer cut short and left open ends here
    client.Start(&get);

    // The server: once the request is in, the answer in pieces of 1..61
    // bytes, one piece per turn of the loop; then maybe a close.
    size_t sent = 0;
    uint32_t seed = plan >> 4;
    bool closed = false;
    auto serve = [&] {
      if (closed || !ServeRequest(&server)) return;
      if (sent < answer.size()) {
        seed = seed * 1103515245u + 12345u;
        const size_t piece = std::min<size_t>(answer.size() - sent, 1 + (seed >> 16) % 61);
        const ssize_t n = ::send(server.conn.get(), answer.data() + sent, piece, MSG_NOSIGNAL);
        if (n > 0) sent += static_cast<size_t>(n);
      } else if (close_after) {
        server.conn.Reset();
        closed = true;
      }
    };
    FUZZ_CHECK(DriveUntilDone(driver->get(), &client, &get, start + 3'000'000'000ull, serve));
    switch (get.result) {
      case Http1Get::Result::kOk:
        FUZZ_CHECK(get.status >= 200 && get.status <= 999);
        if (get.status < 300) {
          FUZZ_CHECK(get.content_length <= max_body);
          if (in_pieces) {
            const uint64_t total =
                a.size() + std::min<uint64_t>(5, get.content_length - a.size()) + b.size();
            FUZZ_CHECK(total == get.content_length);
            FUZZ_CHECK(b.empty() || a.size() == 7);
            FUZZ_CHECK(body.empty());
          } else {
            FUZZ_CHECK(body.size() == get.content_length);
          }
        } else {
          FUZZ_CHECK(get.error_body.size() <= 4096);
        }
        break;
      case Http1Get::Result::kTooLarge: FUZZ_CHECK(get.content_length > max_body); break;
      case Http1Get::Result::kFailed:
      case Http1Get::Result::kTimedOut:
      case Http1Get::Result::kUnsupported: FUZZ_CHECK(!get.error.empty()); break;
    }

    // A second GET on the same client gets a plain answer right, whether
    // it reuses the first connection or makes a new one.
    server.conn.Reset();
    std::vector<uint8_t> second_body;
    Http1Get second = get;
    second.body = &second_body;
    second.pieces.clear();
    second.max_body = 1 << 20;
    const uint64_t again = MonotonicNanos();
    second.connect_deadline_ns = again + 1'000'000'000;
    second.deadline_ns = again + 1'000'000'000;
    client.Start(&second);
    bool answered = false;
    auto serve_plain = [&] {
      if (answered || !ServeRequest(&server)) return;
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
      FUZZ_CHECK(::send(server.conn.get(), ok.data(), ok.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(ok.size()));
      answered = true;
    };
    FUZZ_CHECK(
        DriveUntilDone(driver->get(), &client, &second, again + 3'000'000'000ull, serve_plain));
    FUZZ_CHECK(second.result == Http1Get::Result::kOk);
    FUZZ_CHECK(std::string(second_body.begin(), second_body.end()) == "hello");
  }
  return 0;
}
