// Object URLs of remote datasets: parsing http://, https:// and
// s3://bucket/key into their parts, and the redacted form used in every log
// line and status message (no user:password, no query string: presigned
// URLs carry their signature there).
//
// Thread-safety: pure functions over values.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace conveyor::remote {

struct ObjectUrl {
  enum class Scheme { kHttp, kHttps, kS3 };
  Scheme scheme = Scheme::kHttp;
  // http(s): "host" or "host:port" (IPv6 in brackets); s3: the bucket.
  std::string authority;
  // http(s): the path and query, starting with '/'; s3: the key (no leading '/').
  std::string path;
};

// InvalidArgument naming the (redacted) URL and the reason for anything that
// is not scheme://authority[/path] with a known scheme, a non-empty
// authority without spaces or control bytes, and (s3) a non-empty key.
absl::StatusOr<ObjectUrl> ParseObjectUrl(std::string_view url);

// `url` for messages: "user:pass@" dropped, a query string replaced by
// "?…", control bytes and invalid UTF-8 escaped (EscapeText).
std::string RedactUrl(std::string_view url);

// `url` without its secrets as RedactUrl drops them, not escaped: for names
// that are escaped where they are shown (a dataset's sample names).
std::string StripUrlSecrets(std::string_view url);

// `text` (a message that may quote URLs: a list file's bad line, a shard's
// error) with the secrets of every URL in it dropped: from each
// "scheme://" up to a space, a quote or the end, "user:pass@" goes and a
// query becomes "?…"; an authority cut short before its '@' (a quote
// truncated by "...") that is not host[:port] becomes "…". The rest of the
// text is kept as it is.
std::string RedactUrlsIn(std::string_view text);

// scheme://host[:port] of an endpoint or URL → "host[:port]".
std::string AuthorityOf(std::string_view url);

// The host part of `authority` ("host:port" → "host"; "[::1]:80" → "::1").
std::string_view HostOf(std::string_view authority);

}  // namespace conveyor::remote
