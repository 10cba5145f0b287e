// The `engine` section: per-stream queue and concurrency limits and the
// retries of system errors while fetching (core/engine/engine.h).
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/base/status_macros.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// The config's own bounds of the engine's limits (the engine takes any
// positive value; these keep a typo from asking for millions).
constexpr uint64_t kMaxFetchQueueCapacity = 65536;
constexpr uint64_t kMaxStageConcurrency = 4096;
constexpr uint64_t kMaxFetchAttempts = 1000;
constexpr uint64_t kMaxInitialBackoffMs = 60'000;
constexpr uint64_t kMaxBackoffMs = 600'000;
constexpr double kMinRetryDeadlineSeconds = 0.001;
constexpr double kMaxRetryDeadlineSeconds = 86400;

// A duration written as whole milliseconds.
FieldSpec<EngineOptions> Millis(std::string key, absl::Duration EngineOptions::*member, uint64_t hi,
                                std::string doc) {
  return schema::Custom<EngineOptions>(
      std::move(key), UintType(0, hi),
      Quoted(absl::StrCat(absl::ToInt64Milliseconds(EngineOptions{}.*member))), std::move(doc),
      [member, hi](const YamlFields& y, const YAML::Node& n, const std::string& field,
                   EngineOptions* e) -> absl::Status {
        uint32_t ms = 0;
        RETURN_IF_ERROR(y.ReadUintAs(n, field, 0, hi, &ms));
        e->*member = absl::Milliseconds(ms);
        return absl::OkStatus();
      });
}

const Section<EngineOptions>& EngineSection() {
  using schema::Custom;
  using schema::Size;
  using schema::Uint;
  static const Section<EngineOptions> kSection({
      Uint<EngineOptions>("fetch_queue_capacity", &EngineOptions::fetch_queue_capacity, 0,
                          kMaxFetchQueueCapacity,
                          "fetched-but-not-decoded samples per stream (0: 2 × threads, ≥ 4)"),
      Size<EngineOptions>("fetch_queue_bytes", &EngineOptions::fetch_queue_bytes, 1,
                          "bytes of fetched samples a stream may hold"),
      Uint<EngineOptions>("fetch_concurrency", &EngineOptions::fetch_concurrency, 1,
                          kMaxStageConcurrency, "file reads in flight per stream"),
      Uint<EngineOptions>("decode_concurrency", &EngineOptions::decode_concurrency, 0,
                          kMaxStageConcurrency, "decodes in flight per stream (0: threads)"),
      Uint<EngineOptions>("fetch_retry_max_attempts", &EngineOptions::fetch_retry_max_attempts, 1,
                          kMaxFetchAttempts, "tries of a read failing with a system error"),
      Millis("fetch_retry_initial_backoff_ms", &EngineOptions::fetch_retry_initial_backoff,
             kMaxInitialBackoffMs, "wait before the first retry; doubles with each further one"),
      Millis("fetch_retry_max_backoff_ms", &EngineOptions::fetch_retry_max_backoff, kMaxBackoffMs,
             "the longest wait between retries (at least the initial one)"),
      Custom<EngineOptions>(
          "fetch_retry_deadline_seconds",
          NumberType(kMinRetryDeadlineSeconds, kMaxRetryDeadlineSeconds),
          Quoted(FormatNumberBound(absl::ToDoubleSeconds(EngineOptions{}.fetch_retry_deadline))),
          "the stream ends once a sample's first system error is this old",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             EngineOptions* e) -> absl::Status {
            double seconds = 0;
            RETURN_IF_ERROR(y.ReadDouble(n, field, kMinRetryDeadlineSeconds,
                                         kMaxRetryDeadlineSeconds, &seconds));
            e->fetch_retry_deadline = absl::Seconds(seconds);
            return absl::OkStatus();
          }),
  });
  return kSection;
}

}  // namespace

absl::Status ParseEngine(const YamlFields& y, const YAML::Node& n, EngineOptions* e) {
  RETURN_IF_ERROR(EngineSection().Read(y, n, "engine", e));
  // Errors of the system (out of fds, EIO, ...) while fetching a sample are
  // retried with backoff, then the stream ends with UNAVAILABLE.
  if (e->fetch_retry_max_backoff < e->fetch_retry_initial_backoff) {
    return y.Error(
        "engine.fetch_retry_max_backoff_ms",
        n["fetch_retry_max_backoff_ms"] ? n["fetch_retry_max_backoff_ms"]
                                        : n["fetch_retry_initial_backoff_ms"],
        absl::StrCat("must be at least fetch_retry_initial_backoff_ms (",
                     absl::ToInt64Milliseconds(e->fetch_retry_initial_backoff), " ms), got ",
                     absl::ToInt64Milliseconds(e->fetch_retry_max_backoff), " ms"));
  }
  return absl::OkStatus();
}

std::vector<FieldDoc> EngineDocs() { return EngineSection().Docs(); }

}  // namespace conveyor::server
