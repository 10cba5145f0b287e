// ParseResponseHead: the heads the direct HTTP client reads itself, the
// ones it leaves to libcurl, and the ones that are not HTTP.
#ifdef CONVEYOR_HAVE_SERVER  // (remote/ is built with the server)
#include "remote/http_response_head.h"

#include <string>

#include "catch2/catch.hpp"

namespace conveyor::remote {
namespace {

using Parse = ResponseHead::Parse;

ResponseHead P(const std::string& s) { return ParseResponseHead(s, 16 << 10); }

TEST_CASE("ParseResponseHead reads the status, Content-Length and keep-alive", "[http1]") {
  const std::string head =
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\n"
      "content-length:  10 \r\n\r\n";
  const ResponseHead h = P(head + "0123456789");
  REQUIRE(h.parse == Parse::kOk);
  CHECK(h.status == 206);
  CHECK(h.content_length == 10);
  CHECK(h.keep_alive);
  CHECK(h.head_bytes == head.size());

  CHECK(P("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").keep_alive ==
        false);
  CHECK(P("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: Keep-Alive, Close\r\n\r\n")
            .keep_alive == false);
  // HTTP/1.0 closes unless it says keep-alive.
  CHECK(P("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n").keep_alive == false);
  CHECK(P("HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n").keep_alive);
  // No reason phrase; 204 has no body.
  CHECK(P("HTTP/1.1 503\r\nContent-Length: 9\r\n\r\n").status == 503);
  const ResponseHead empty = P("HTTP/1.1 204 No Content\r\n\r\n");
  REQUIRE(empty.parse == Parse::kOk);
  CHECK(empty.content_length == 0);
  // The same length twice is fine.
  CHECK(P("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n").parse == Parse::kOk);
}

TEST_CASE("ParseResponseHead waits for the blank line", "[http1]") {
  CHECK(P("").parse == Parse::kIncomplete);
  CHECK(P("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n").parse == Parse::kIncomplete);
  CHECK(P("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r").parse == Parse::kIncomplete);
}

TEST_CASE("ParseResponseHead leaves to libcurl what the direct client does not read", "[http1]") {
  const ResponseHead chunked =
      P("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  CHECK(chunked.parse == Parse::kUnsupported);
  CHECK(std::string(chunked.why).find("chunked") != std::string::npos);
  CHECK(P("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody until close").parse ==
        Parse::kUnsupported);
  CHECK(P("HTTP/1.1 100 Continue\r\n\r\n").parse == Parse::kUnsupported);
  CHECK(P("HTTP/2 200\r\ncontent-length: 1\r\n\r\n").parse == Parse::kUnsupported);
  CHECK(P("HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 1\r\n\r\n").parse ==
        Parse::kUnsupported);
  // A head longer than the limit, complete or not.
  const std::string big = "HTTP/1.1 200 OK\r\nX-Pad: " + std::string(20 << 10, 'x') + "\r\n";
  CHECK(P(big).parse == Parse::kUnsupported);
  CHECK(P(big + "Content-Length: 1\r\n\r\n").parse == Parse::kUnsupported);
}

TEST_CASE("ParseResponseHead says what is wrong with an answer that is not HTTP", "[http1]") {
  for (const char* bad :
       {"SSH-2.0-OpenSSH_9.2\r\n\r\n", "<html>hello</html>", "HTTP/1.1 2x0 OK\r\n\r\n",
        "HTTP/1.1 200OK\r\n\r\n", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 12abc\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"}) {
    INFO(bad);
    const ResponseHead h = P(bad);
    CHECK(h.parse == Parse::kMalformed);
    CHECK(std::string(h.why).size() > 0);
  }
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER
