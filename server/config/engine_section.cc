// The `engine` section: per-stream queue and concurrency limits, the
// retries of system errors while fetching, and the workers' CPU budget
// (core/engine/engine.h).
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
      schema::Bool<EngineOptions>(
          "autotune", &EngineOptions::autotune,
          "each stream tunes its fetch and decode concurrency and its fetch queue"),
      Uint<EngineOptions>("autotune_max_fetch_concurrency",
                          &EngineOptions::autotune_max_fetch_concurrency, 1, kMaxStageConcurrency,
                          "autotune: the most reads in flight it gives a stream"),
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
      // Read by ParseEngine: "N%" needs the machine's CPUs.
      schema::Manual<EngineOptions>("cpu_budget", "number > 0 or `N%`", "none (no limit)",
                                    "CPUs the workers may use together (`N%`: of the CPUs usable)")
          .InGroup("manual"),
  });
  return kSection;
}

}  // namespace

absl::Status ParseCpuBudget(const YamlFields& y, const YAML::Node& n, double usable_cpus,
                            double* out) {
  const std::string field = "engine.cpu_budget";
  RETURN_IF_ERROR(y.Scalar(n, field, "a number of CPUs or N%"));
  const std::string text(absl::StripAsciiWhitespace(n.Scalar()));
  double cpus = 0;
  if (absl::EndsWith(text, "%")) {
    double percent = 0;
    if (!absl::SimpleAtod(text.substr(0, text.size() - 1), &percent) || !std::isfinite(percent) ||
        percent <= 0 || percent > 100) {
      return y.Error(field, n, absl::StrCat("expected N% with 0 < N <= 100, got '", text, "'"));
    }
    if (usable_cpus <= 0) {
      return y.Error(field, n,
                     "N% needs the number of CPUs this process may use, which is unknown here; "
                     "give a number of CPUs");
    }
    cpus = usable_cpus * percent / 100;
  } else {
    if (!absl::SimpleAtod(text, &cpus) || !std::isfinite(cpus)) {
      return y.Error(field, n,
                     absl::StrCat("expected a number of CPUs (1, 1.5) or N%, got '", text, "'"));
    }
    if (cpus <= 0) {
      return y.Error(field, n, absl::StrCat("must be more than 0 CPUs, got ", text));
    }
    if (usable_cpus > 0 && cpus > usable_cpus + 1e-9) {
      return y.Error(field, n,
                     absl::StrFormat("%s CPUs is more than the %g this process may use "
                                     "(affinity mask and cgroup CPU quota)",
                                     text, usable_cpus));
    }
    if (cpus > kMaxEngineThreads) {
      return y.Error(field, n, absl::StrCat("must be at most ", kMaxEngineThreads, " CPUs"));
    }
  }
  *out = cpus;
  return absl::OkStatus();
}

absl::Status ParseEngine(const YamlFields& y, const YAML::Node& n, double usable_cpus,
                         EngineOptions* e) {
  RETURN_IF_ERROR(EngineSection().Read(y, n, "engine", e));
  if (n["cpu_budget"]) {
    RETURN_IF_ERROR(ParseCpuBudget(y, n["cpu_budget"], usable_cpus, &e->cpu_budget));
  }
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
