// The head of an HTTP/1.x answer (status line and header fields), parsed
// for the reader's own plain-HTTP client (remote/http1_client.h): the
// status, the body's length and whether the connection may be used again.
// Anything that client does not handle itself (a chunked or unsized body,
// 1xx answers, a version other than 1.0/1.1) is reported, not guessed at,
// so the request can be handed to libcurl instead.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
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
};

// Parses the head at the start of `bytes` (which may hold body bytes after
// it). Limits: at most `max_head_bytes` of head, else kUnsupported.
ResponseHead ParseResponseHead(std::string_view bytes, size_t max_head_bytes);

}  // namespace conveyor::remote
