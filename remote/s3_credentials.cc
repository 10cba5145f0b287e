#include "remote/s3_credentials.h"

#include <fstream>
#include <map>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/base/text_escape.h"

namespace conveyor::remote {

namespace {

std::string Env(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* v = getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// The key = value pairs of [profile] in an INI file; false when the file
// cannot be opened.
bool ReadProfile(const std::string& path, const std::string& profile,
                 std::map<std::string, std::string>* out, bool* found) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  bool inside = false;
  *found = false;
  while (std::getline(in, line)) {
    absl::string_view l = absl::StripAsciiWhitespace(line);
    if (l.empty() || l.front() == '#' || l.front() == ';') continue;
    if (l.front() == '[' && l.back() == ']') {
      absl::string_view name = absl::StripAsciiWhitespace(l.substr(1, l.size() - 2));
      absl::ConsumePrefix(&name, "profile ");
      inside = name == absl::string_view(profile);
      *found |= inside;
      continue;
    }
    if (!inside) continue;
    const size_t eq = l.find('=');
    if (eq == absl::string_view::npos) continue;
    (*out)[absl::AsciiStrToLower(absl::StripAsciiWhitespace(l.substr(0, eq)))] =
        std::string(absl::StripAsciiWhitespace(l.substr(eq + 1)));
  }
  return true;
}

}  // namespace

std::string S3Config::Describe() const {
  std::string key_hint;
  if (access_key_id.size() > 4) {
    key_hint =
        absl::StrCat(" (key …", EscapeText(access_key_id.substr(access_key_id.size() - 4)), ")");
  }
  return absl::StrCat("endpoint ", EscapeText(endpoint), path_style ? "" : " (virtual-hosted)",
                      ", region ", EscapeText(region), ", credentials from ",
                      EscapeText(credentials_from), key_hint);
}

absl::StatusOr<S3Config> ResolveS3Config(const RemoteOptions& options,
                                         const std::function<const char*(const char*)>& getenv) {
  S3Config c;
  c.region = options.s3_region;
  if (c.region.empty()) c.region = Env(getenv, "AWS_REGION");
  if (c.region.empty()) c.region = Env(getenv, "AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = options.s3_endpoint;
  if (c.endpoint.empty()) c.endpoint = Env(getenv, "AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env(getenv, "AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) {
    c.endpoint = absl::StrCat("https://s3.", c.region, ".amazonaws.com");
    c.path_style = false;
  }
  while (absl::EndsWith(c.endpoint, "/")) c.endpoint.pop_back();
  if (!absl::StartsWith(c.endpoint, "http://") && !absl::StartsWith(c.endpoint, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("S3 endpoint '", EscapeText(c.endpoint),
                                                   "' must start with http:// or https://"));
  }

  const std::string env_key = Env(getenv, "AWS_ACCESS_KEY_ID");
  const std::string env_secret = Env(getenv, "AWS_SECRET_ACCESS_KEY");
  if (!env_key.empty() && !env_secret.empty()) {
    c.access_key_id = env_key;
    c.secret_access_key = env_secret;
    c.session_token = Env(getenv, "AWS_SESSION_TOKEN");
    c.credentials_from = "environment";
    return c;
  }
  std::string profile = options.s3_profile;
  const bool profile_asked = !profile.empty() || !Env(getenv, "AWS_PROFILE").empty();
  if (profile.empty()) profile = Env(getenv, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  std::string file = Env(getenv, "AWS_SHARED_CREDENTIALS_FILE");
  const bool file_asked = !file.empty();
  if (file.empty()) {
    const std::string home = Env(getenv, "HOME");
    if (!home.empty()) file = home + "/.aws/credentials";
  }
  std::map<std::string, std::string> values;
  bool found = false;
  if (file.empty() || !ReadProfile(file, profile, &values, &found)) {
    if (file_asked || profile_asked) {
      return absl::NotFoundError(absl::StrCat("cannot read the S3 credentials file '",
                                              EscapeText(file), "' (profile '", EscapeText(profile),
                                              "')"));
    }
    c.credentials_from = "none (unsigned requests)";
    return c;
  }
  if (!found) {
    if (profile_asked) {
      return absl::NotFoundError(absl::StrCat("S3 credentials file '", EscapeText(file),
                                              "' has no profile '", EscapeText(profile), "'"));
    }
    c.credentials_from = "none (unsigned requests)";
    return c;
  }
  c.access_key_id = values["aws_access_key_id"];
  c.secret_access_key = values["aws_secret_access_key"];
  c.session_token = values["aws_session_token"];
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("S3 credentials file '", EscapeText(file), "' profile '", EscapeText(profile),
                     "' needs both aws_access_key_id and aws_secret_access_key"));
  }
  c.credentials_from = absl::StrCat(file, " [", profile, "]");
  return c;
}

}  // namespace conveyor::remote
