#include "remote/s3_url.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"
#include "remote/url.h"

namespace conveyor::remote {

std::string EncodeS3Key(std::string_view key) {
  std::string out;
  for (unsigned char c : key) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

S3Address S3ObjectAddress(const S3Config& s3, const std::string& bucket, const std::string& key) {
  S3Address a;
  if (s3.path_style) {
    a.url = absl::StrCat(s3.endpoint, "/", bucket, "/", EncodeS3Key(key));
    a.host = AuthorityOf(s3.endpoint);
  } else {
    const size_t sep = s3.endpoint.find("://") + 3;
    a.url = absl::StrCat(s3.endpoint.substr(0, sep), bucket, ".", s3.endpoint.substr(sep), "/",
                         EncodeS3Key(key));
    a.host = AuthorityOf(a.url);
  }
  return a;
}

std::string S3ErrorCode(const std::vector<uint8_t>& body) {
  const std::string_view b(reinterpret_cast<const char*>(body.data()), body.size());
  const size_t start = b.find("<Code>");
  if (start == std::string_view::npos) return "";
  const size_t end = b.find("</Code>", start);
  if (end == std::string_view::npos) return "";
  return EscapeText(b.substr(start + 6, std::min<size_t>(end - start - 6, 64)));
}

}  // namespace conveyor::remote
