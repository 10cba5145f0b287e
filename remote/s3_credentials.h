// Where S3 requests go and what signs them: the endpoint, the region and the
// credentials, taken from RemoteOptions, then the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION,
// AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_PROFILE,
// AWS_SHARED_CREDENTIALS_FILE), then the shared credentials file
// (~/.aws/credentials, INI: [profile] with aws_access_key_id,
// aws_secret_access_key, aws_session_token). No credentials anywhere:
// requests go unsigned (public buckets).
//
// Secrets never leave this struct in text: Describe() names where they came
// from and the access key id's last 4 characters only.
//
// Thread-safety: plain values and a pure function (reads the environment
// and one file when called).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "remote/remote_options.h"

namespace conveyor::remote {

struct S3Config {
  std::string endpoint;    // scheme://host[:port], no trailing '/'
  bool path_style = true;  // endpoint/bucket/key (false: bucket.host/key on AWS)
  std::string region;
  std::string access_key_id;  // "" = unsigned requests
  std::string secret_access_key;
  std::string session_token;
  std::string credentials_from;  // "environment", "FILE [profile]" or "none"

  // e.g. "endpoint http://127.0.0.1:9000, region us-east-1, credentials from
  // environment (key …ABCD)": never a secret.
  std::string Describe() const;
};

// `getenv` returns nullptr for an unset variable (tests pass their own).
// Errors name the credentials file and the profile (never a value): an
// unreadable file that was asked for, a named profile that is missing, a
// profile with a key id but no secret.
absl::StatusOr<S3Config> ResolveS3Config(const RemoteOptions& options,
                                         const std::function<const char*(const char*)>& getenv);

}  // namespace conveyor::remote
