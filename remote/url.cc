#include "remote/url.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/text_escape.h"

namespace conveyor::remote {

namespace {

bool HasSpaceOrControl(std::string_view s) {
  for (unsigned char c : s) {
    if (c <= 0x20 || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

std::string RedactUrl(std::string_view url) { return EscapeText(StripUrlSecrets(url)); }

std::string StripUrlSecrets(std::string_view url) {
  std::string out;
  const size_t scheme_end = url.find("://");
  std::string_view rest = url;
  if (scheme_end != std::string_view::npos) {
    out.append(url.substr(0, scheme_end + 3));
    rest = url.substr(scheme_end + 3);
    const size_t authority_end = rest.find_first_of("/?#");
    const std::string_view authority = rest.substr(0, authority_end);
    const size_t at = authority.rfind('@');
    if (at != std::string_view::npos) rest.remove_prefix(at + 1);
  }
  const size_t query = rest.find_first_of("?#");
  if (query != std::string_view::npos) {
    out.append(rest.substr(0, query));
    out.append("?…");
  } else {
    out.append(rest);
  }
  return out;
}

std::string RedactUrlsIn(std::string_view text) {
  auto scheme_char = [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  };
  auto ends_url = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\'' || c == '"' || c == '`' ||
           c == '<' || c == '>';
  };
  std::string out;
  size_t done = 0;  // text[0, done) is in out
  size_t from = 0;
  while (true) {
    const size_t sep = text.find("://", from);
    if (sep == std::string_view::npos) break;
    size_t begin = sep;
    while (begin > done && scheme_char(text[begin - 1])) --begin;
    size_t end = sep + 3;
    while (end < text.size() && !ends_url(text[end])) ++end;
    if (begin == sep) {  // no scheme: not a URL
      from = sep + 3;
      continue;
    }
    out.append(text.substr(done, begin - done));
    std::string url = StripUrlSecrets(text.substr(begin, end - begin));
    // An authority without '@' that is not host[:port]: maybe "user:pass"
    // cut short where the text was truncated.
    const size_t a = url.find("://") + 3;
    const size_t a_end = std::min(url.find_first_of("/?#", a), url.size());
    const std::string_view authority = std::string_view(url).substr(a, a_end - a);
    const size_t colon = authority.rfind(':');
    if (!authority.empty() && authority.front() != '[' && colon != std::string_view::npos) {
      const std::string_view port = authority.substr(colon + 1);
      bool digits = true;
      for (char c : port) digits &= absl::ascii_isdigit(static_cast<unsigned char>(c));
      if (!digits || authority.find(':') != colon) url.replace(a, a_end - a, "…");
    }
    out.append(url);
    done = from = end;
  }
  out.append(text.substr(done));
  return out;
}

std::string AuthorityOf(std::string_view url) {
  const size_t sep = url.find("://");
  std::string_view rest = sep == std::string_view::npos ? url : url.substr(sep + 3);
  return std::string(rest.substr(0, rest.find_first_of("/?#")));
}

std::string_view HostOf(std::string_view authority) {
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    return close == std::string_view::npos ? authority.substr(1) : authority.substr(1, close - 1);
  }
  const size_t colon = authority.rfind(':');
  return colon == std::string_view::npos ? authority : authority.substr(0, colon);
}

absl::StatusOr<ObjectUrl> ParseObjectUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad URL '", RedactUrl(url), "': ", std::string(why)));
  };
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    return bad("not scheme://host/path (http://, https:// or s3://bucket/key)");
  }
  const std::string scheme = absl::AsciiStrToLower(std::string(url.substr(0, sep)));
  ObjectUrl out;
  if (scheme == "http") {
    out.scheme = ObjectUrl::Scheme::kHttp;
  } else if (scheme == "https") {
    out.scheme = ObjectUrl::Scheme::kHttps;
  } else if (scheme == "s3") {
    out.scheme = ObjectUrl::Scheme::kS3;
  } else {
    return bad(absl::StrCat("unknown scheme '", EscapeText(scheme), "' (http, https or s3)"));
  }
  const std::string_view rest = url.substr(sep + 3);
  if (HasSpaceOrControl(rest)) return bad("holds a space or a control byte");
  const size_t authority_end = rest.find_first_of("/?#");
  out.authority = std::string(rest.substr(0, authority_end));
  if (out.scheme == ObjectUrl::Scheme::kS3) {
    if (out.authority.empty()) return bad("no bucket");
    if (out.authority.find_first_of("@:") != std::string::npos) {
      return bad("a bucket name holds no ':' or '@'");
    }
    if (authority_end == std::string_view::npos || rest[authority_end] != '/' ||
        authority_end + 1 == rest.size()) {
      return bad("no key (s3://bucket/key)");
    }
    out.path = std::string(rest.substr(authority_end + 1));
    return out;
  }
  const size_t at = out.authority.rfind('@');
  if (at != std::string::npos) out.authority.erase(0, at + 1);
  if (HostOf(out.authority).empty()) return bad("no host");
  out.path =
      authority_end == std::string_view::npos ? "/" : std::string(rest.substr(authority_end));
  if (out.path.front() != '/') out.path.insert(0, "/");
  return out;
}

}  // namespace conveyor::remote
