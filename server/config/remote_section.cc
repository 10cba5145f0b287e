// The `remote` section and its `s3` map: how HTTP(S)/S3 samples and shards
// are read (remote/remote_options.h).
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

using remote::RemoteOptions;

// The config's bounds of the remote reader's limits.
constexpr uint64_t kMaxConnectionsPerHost = 4096;
constexpr double kMaxRequestsPerSecond = 1e6;
constexpr uint64_t kMaxConnectTimeoutMs = 600'000;
constexpr uint64_t kMaxRequestTimeoutMs = 3'600'000;
constexpr uint64_t kMaxAttempts = 100;
constexpr uint64_t kMaxInitialBackoffMs = 60'000;
constexpr uint64_t kMaxBackoffMs = 600'000;
constexpr uint64_t kMinReadAheadBytes = uint64_t{1} << 20;
constexpr uint64_t kMaxIoThreads = 64;

const Section<RemoteOptions>& S3Section() {
  using schema::String;
  static const Section<RemoteOptions> kSection({
      String<RemoteOptions>("endpoint", &RemoteOptions::s3_endpoint,
                            "where `s3://bucket/key` objects are read")
          .WithType("`http(s)://host[:port]`")
          .WithDefault("`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, else "
                       "`https://s3.REGION.amazonaws.com`")
          .WithCheck([](const RemoteOptions& r) {
            if (absl::StartsWith(r.s3_endpoint, "http://") ||
                absl::StartsWith(r.s3_endpoint, "https://")) {
              return absl::OkStatus();
            }
            return absl::InvalidArgumentError(absl::StrCat(
                "expected an http:// or https:// URL, got '", EscapeText(r.s3_endpoint), "'"));
          }),
      String<RemoteOptions>("region", &RemoteOptions::s3_region,
                            "the region requests are signed for")
          .WithDefault("`AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`"),
      String<RemoteOptions>("profile", &RemoteOptions::s3_profile,
                            "the profile of the shared credentials file")
          .WithDefault("`AWS_PROFILE`, else `default`"),
  });
  return kSection;
}

const Section<RemoteOptions>& RemoteSection() {
  using schema::Bool;
  using schema::Enum;
  using schema::Manual;
  using schema::Number;
  using schema::Size;
  using schema::Uint;
  static const Section<RemoteOptions> kSection({
      Uint<RemoteOptions>("max_connections_per_host", &RemoteOptions::max_connections_per_host, 1,
                          kMaxConnectionsPerHost, "transfers in flight to one host at most"),
      Bool<RemoteOptions>("adaptive_connections", &RemoteOptions::adaptive_connections,
                          "each host's limit of transfers in flight adapts (AIMD)"),
      Number<RemoteOptions>("requests_per_second_per_host",
                            &RemoteOptions::requests_per_second_per_host, 0, kMaxRequestsPerSecond,
                            "requests started per second per host at most")
          .WithDefault("`0` (no limit)"),
      Uint<RemoteOptions>("connect_timeout_ms", &RemoteOptions::connect_timeout_ms, 1,
                          kMaxConnectTimeoutMs, "longest wait for a connection"),
      Uint<RemoteOptions>("request_timeout_ms", &RemoteOptions::request_timeout_ms, 1,
                          kMaxRequestTimeoutMs, "longest time for one whole request"),
      Uint<RemoteOptions>("max_attempts", &RemoteOptions::max_attempts, 1, kMaxAttempts,
                          "tries per request, the first included"),
      Uint<RemoteOptions>("initial_backoff_ms", &RemoteOptions::initial_backoff_ms, 0,
                          kMaxInitialBackoffMs, "wait before the first retry (doubling, jittered)"),
      Uint<RemoteOptions>("max_backoff_ms", &RemoteOptions::max_backoff_ms, 0, kMaxBackoffMs,
                          "the longest wait between retries"),
      Enum<RemoteOptions>("failed_object", &RemoteOptions::failed_object,
                          std::vector<std::pair<std::string, RemoteOptions::FailedObject>>{
                              {"stream", RemoteOptions::FailedObject::kStream},
                              {"sample", RemoteOptions::FailedObject::kSample}},
                          "what a read whose attempts are all spent is"),
      Size<RemoteOptions>("read_ahead_bytes", &RemoteOptions::read_ahead_bytes, kMinReadAheadBytes,
                          "bytes of samples read ahead for the reads to come"),
      Bool<RemoteOptions>("direct_http", &RemoteOptions::direct_http,
                          "plain `http://` GETs through the daemon's own HTTP/1.1 client"),
      Uint<RemoteOptions>("io_threads", &RemoteOptions::io_threads, 1, kMaxIoThreads,
                          "I/O threads of the remote reader"),
      Manual<RemoteOptions>("s3", "map", "none", "S3 endpoint, region and credentials profile")
          .WithSubRows(S3Section().Docs()),
  });
  return kSection;
}

}  // namespace

absl::Status ParseRemote(const YamlFields& y, const YAML::Node& n, RemoteOptions* r) {
  RETURN_IF_ERROR(RemoteSection().Read(y, n, "remote", r));
  if (r->max_backoff_ms < r->initial_backoff_ms) {
    return y.Error("remote.max_backoff_ms", n["max_backoff_ms"] ? n["max_backoff_ms"] : n,
                   absl::StrCat("must be at least remote.initial_backoff_ms (",
                                r->initial_backoff_ms, " ms), got ", r->max_backoff_ms, " ms"));
  }
  if (n["s3"]) RETURN_IF_ERROR(S3Section().Read(y, n["s3"], "remote.s3", r));
  return absl::OkStatus();
}

std::vector<FieldDoc> RemoteDocs() { return RemoteSection().Docs(); }

}  // namespace conveyor::server
