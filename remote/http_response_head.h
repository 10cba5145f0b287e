// The head of an HTTP/1.x answer (status line and header fields), parsed
// for the reader's own plain-HTTP client (remote/http1_client.h): the
// status, the body's length and whether the connection may be used again.
// Anything that client does not handle itself (a chunked or unsized body,
// 1xx answers, a version other than 1.0/1.1) is reported, not guessed at,
// so the request can be handed to libcurl instead. Also the check of a 206
// answer's Content-Range against the range asked, shared by both clients
// (the direct one and libcurl's header callback).
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace conveyor::remote {

struct ResponseHead {
  enum class Parse {
    kIncomplete,   // no blank line yet: read more
    kOk,           // a head this client handles
    kUnsupported,  // a valid answer of a kind left to libcurl (`why` says which)
    kMalformed,    // not HTTP: the connection is broken (`why` says how)
  };
  Parse parse = Parse::kIncomplete;
  const char* why = "";   // kUnsupported / kMalformed: a static string
  size_t head_bytes = 0;  // kOk: bytes up to and including the blank line
  int status = 0;
  uint64_t content_length = 0;
  bool keep_alive = true;  // false: the server closes the connection after this answer
  // kOk: the Content-Range field as sent (trimmed), pointing into the bytes
  // parsed; absent when the answer has none.
  std::optional<std::string_view> content_range;
};

// Parses the head at the start of `bytes` (which may hold body bytes after
// it). Limits: at most `max_head_bytes` of head, else kUnsupported.
ResponseHead ParseResponseHead(std::string_view bytes, size_t max_head_bytes);

// A Content-Range field "bytes FIRST-LAST/TOTAL" (RFC 9110 14.4; TOTAL "*"
// when the server does not know it).
struct ContentRange {
  static constexpr uint64_t kUnknownTotal = UINT64_MAX;
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive, >= first
  uint64_t total = kUnknownTotal;
};
// The range `value` names; nullopt when it is not a satisfied byte range
// (another unit, "*/TOTAL", LAST before FIRST, LAST past TOTAL, junk).
std::optional<ContentRange> ParseContentRange(std::string_view value);

// Whether a 206 answer to a request for bytes [offset, offset + length) of
// an object of `known_size` bytes (0: not known) is that answer: its
// Content-Range field `value` (nullopt: the answer has none) must name
// exactly that range (or, for a range past the object's end, the part up to
// the end that its total says is there) and, when the size is known, that
// total. "" when it does; else why not, for messages (the field quoted,
// escaped and bounded).
// REQUIRES: length > 0.
std::string ContentRangeMismatch(std::optional<std::string_view> value, uint64_t offset,
                                 uint64_t length, uint64_t known_size);

}  // namespace conveyor::remote
