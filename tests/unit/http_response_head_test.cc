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

TEST_CASE("ParseResponseHead keeps the Content-Range field as sent", "[http1]") {
  // content_range points into the bytes parsed: they must outlive it.
  const std::string text =
      "HTTP/1.1 206 Partial Content\r\ncontent-range:  bytes 5-9/100 \r\n"
      "Content-Length: 5\r\n\r\n";
  const ResponseHead h = P(text);
  REQUIRE(h.parse == Parse::kOk);
  REQUIRE(h.content_range.has_value());
  CHECK(*h.content_range == "bytes 5-9/100");
  CHECK_FALSE(P("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n").content_range.has_value());
  // Two that disagree: which bytes these are cannot be told.
  CHECK(P("HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/10\r\n"
          "Content-Range: bytes 5-9/10\r\nContent-Length: 5\r\n\r\n")
            .parse == Parse::kMalformed);
}

TEST_CASE("ParseContentRange reads satisfied byte ranges, nothing else", "[http1]") {
  const auto r = ParseContentRange("bytes 100-199/1000");
  REQUIRE(r.has_value());
  CHECK(r->first == 100);
  CHECK(r->last == 199);
  CHECK(r->total == 1000);
  const auto unknown = ParseContentRange(" Bytes 0-0/* ");
  REQUIRE(unknown.has_value());
  CHECK(unknown->total == ContentRange::kUnknownTotal);
  for (const char* bad :
       {"", "bytes", "bytes */1000", "items 0-9/10", "bytes 9-0/10", "bytes 0-10/10", "bytes 0-9",
        "bytes -9/10", "bytes 0-9/x", "bytes 0-9/10 extra", "bytes 0x1-9/10",
        "bytes 99999999999999999999-1/2"}) {
    INFO(bad);
    CHECK_FALSE(ParseContentRange(bad).has_value());
  }
}

TEST_CASE("ContentRangeMismatch: a 206 must name the range asked and the size known", "[http1]") {
  // The range asked, with or without a known size.
  CHECK(ContentRangeMismatch("bytes 100-199/1000", 100, 100, 0) == "");
  CHECK(ContentRangeMismatch("bytes 100-199/1000", 100, 100, 1000) == "");
  CHECK(ContentRangeMismatch("bytes 100-199/*", 100, 100, 1000) == "");
  // A range past the end is answered up to the end (a short read, reported
  // later), when the total says that is the end.
  CHECK(ContentRangeMismatch("bytes 995-999/1000", 995, 10, 0) == "");
  // The next range, of the right length: the bug this check is for.
  const std::string next = ContentRangeMismatch("bytes 200-299/1000", 100, 100, 0);
  CHECK(next.find("another range") != std::string::npos);
  CHECK(next.find("'bytes 200-299/1000'") != std::string::npos);
  CHECK(next.find("bytes 100-199 asked") != std::string::npos);
  // Shorter or longer than asked, not at the object's end.
  CHECK(ContentRangeMismatch("bytes 100-149/1000", 100, 100, 0) != "");
  CHECK(ContentRangeMismatch("bytes 100-149/*", 100, 100, 0) != "");
  CHECK(ContentRangeMismatch("bytes 100-299/1000", 100, 100, 0) != "");
  // The object changed size since its HEAD.
  const std::string resized = ContentRangeMismatch("bytes 100-199/2000", 100, 100, 1000);
  CHECK(resized.find("another size") != std::string::npos);
  CHECK(resized.find("1000 bytes") != std::string::npos);
  // None, or junk (quoted escaped and bounded).
  CHECK(ContentRangeMismatch(std::nullopt, 0, 10, 0).find("without a Content-Range") !=
        std::string::npos);
  const std::string junk = ContentRangeMismatch("bytes \x01" + std::string(500, 'x'), 0, 10, 0);
  CHECK(junk.find("bad Content-Range") != std::string::npos);
  CHECK(junk.find('\x01') == std::string::npos);
  CHECK(junk.size() < 300);
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER
