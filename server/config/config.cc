#include "server/config/config.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "server/config/field_checks.h"
#include "server/config/sections.h"
#include "server/config/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// Smallest memory_budget accepted.
constexpr uint64_t kMinMemoryBudget = kMiB;
// The config's bounds of the daemon-wide limits.
constexpr uint64_t kMaxStreams = 100000;
constexpr uint64_t kMaxCreditsPerClient = 100000000;
constexpr double kMaxShutdownSeconds = 3600;
constexpr double kMaxIdleTimeoutSeconds = 7 * 86400;
// Bounds of per_client.weight (server/service/client_limits.h).
constexpr double kMinWeight = kMinClientWeight;
constexpr double kMaxWeight = kMaxClientWeight;

uint64_t MemoryOf(const DaemonConfig& c) { return c.system.MemoryLimit(); }

const Section<DaemonConfig>& PerClientSection() {
  using schema::Size;
  using schema::Uint;
  static const Section<DaemonConfig> kSection({
      Uint<DaemonConfig>(
          "max_streams", [](DaemonConfig & c) -> auto& { return c.per_client.max_streams; }, 0,
          kMaxStreams, "streams one client may have open at once (0: no limit)"),
      Uint<DaemonConfig>(
          "max_credits", [](DaemonConfig & c) -> auto& { return c.per_client.max_credits; }, 0,
          kMaxCreditsPerClient, "credits one client may hold over its open streams (0: no limit)"),
      Size<DaemonConfig>(
          "max_memory", [](DaemonConfig & c) -> auto& { return c.per_client.max_bytes; }, 0,
          "slot memory one client may reserve (0: no limit)", MemoryOf),
      schema::Number<DaemonConfig>(
          "weight", [](DaemonConfig & c) -> auto& { return c.per_client.weight; }, kMinWeight,
          kMaxWeight, "a client's share of the workers' CPU under contention, relative to others'"),
  });
  return kSection;
}

const Section<DaemonConfig>& MetricsSection() {
  static const Section<DaemonConfig> kSection({
      schema::String<DaemonConfig>(
          "listen", [](DaemonConfig & c) -> auto& { return c.metrics.listen; },
          "the HTTP listener of the Prometheus endpoint `/metrics`")
          .WithType("`IPV4:PORT` or `[IPV6]:PORT`")
          .WithDefault("none (off)")
          .WithCheck([](const DaemonConfig& c) {
            return c.metrics.listen.empty() ? absl::OkStatus()
                                            : ValidateMetricsAddress(c.metrics.listen);
          }),
  });
  return kSection;
}

// The top of the document. Sub-sections are read by their own parsers, in
// the order ParseDaemon gives.
const Section<DaemonConfig>& DaemonSection() {
  using schema::Custom;
  using schema::Manual;
  using schema::Number;
  using schema::Size;
  using schema::String;
  using schema::Uint;
  static const Section<DaemonConfig> kSection({
      Manual<DaemonConfig>("listen", "map", "none", "where the daemon listens")
          .WithSubRows(ListenDocs()),
      Manual<DaemonConfig>("access", "map", "none", "bearer tokens").WithSubRows(AccessDocs()),
      Uint<DaemonConfig>(
          "threads", [](DaemonConfig & c) -> auto& { return c.engine.num_threads; }, 0,
          kMaxEngineThreads, "engine worker threads (0: one per CPU usable)"),
      Size<DaemonConfig>("memory_budget", &DaemonConfig::memory_budget, kMinMemoryBudget,
                         "slot memory for all open streams together", MemoryOf)
          .WithDefault("25% of RAM (or of the cgroup memory limit), at most 16 GiB, at least "
                       "256 MiB"),
      Size<DaemonConfig>("gpu_memory_budget", &DaemonConfig::gpu_memory_budget, 0,
                         "device memory of the DEVICE_MEMORY streams on one GPU together")
          .WithDefault("25% of each GPU's memory"),
      Uint<DaemonConfig>("max_streams", &DaemonConfig::max_streams, 1, kMaxStreams,
                         "streams open at once"),
      Number<DaemonConfig>("stream_idle_timeout_seconds",
                           &DaemonConfig::stream_idle_timeout_seconds, 0, kMaxIdleTimeoutSeconds,
                           "a stream holding slots while nothing moves is ended (0: never)"),
      Manual<DaemonConfig>("per_client", "map", "none", "what one client may hold")
          .WithSubRows(PerClientSection().Docs()),
      Custom<DaemonConfig>("allowed_roots", "list of paths", "none (any path)",
                           "folders that datasets may come from",
                           [](const YamlFields& y, const YAML::Node& ar, const std::string& field,
                              DaemonConfig* c) -> absl::Status {
                             if (!ar.IsSequence()) {
                               return y.Error(field, ar,
                                              absl::StrCat("expected a list of directories, got ",
                                                           DescribeNode(ar)));
                             }
                             for (size_t i = 0; i < ar.size(); ++i) {
                               std::string p;
                               RETURN_IF_ERROR(
                                   y.ReadPath(ar[i], absl::StrCat(field, "[", i, "]"), &p));
                               c->allowed_roots.push_back(p);
                             }
                             return absl::OkStatus();
                           }),
      String<DaemonConfig>("log_level", &DaemonConfig::log_level, "the least severe level logged")
          .WithCheck([](const DaemonConfig& c) { return ValidateLogLevel(c.log_level); }),
      String<DaemonConfig>("log_format", &DaemonConfig::log_format,
                           "`text` lines or one JSON object per line")
          .WithType("`text` \\| `json`")
          .WithCheck([](const DaemonConfig& c) { return ValidateLogFormat(c.log_format); }),
      Manual<DaemonConfig>("metrics", "map", "none", "the Prometheus endpoint")
          .WithSubRows(MetricsSection().Docs()),
      Number<DaemonConfig>("shutdown_timeout_seconds", &DaemonConfig::shutdown_timeout_seconds, 0,
                           kMaxShutdownSeconds, "how long calls may take to finish at shutdown"),
      Manual<DaemonConfig>("engine", "map", "none", "per-stream limits of the engine")
          .WithSubRows(EngineDocs()),
      Manual<DaemonConfig>("remote", "map", "none", "HTTP(S)/S3 reads").WithSubRows(RemoteDocs()),
      Manual<DaemonConfig>("cache", "map", "none", "the node-local cache of remote objects")
          .WithSubRows(CacheDocs()),
      Manual<DaemonConfig>("pipelines", "map name → pipeline", "required",
                           "the pipelines clients may open (at least one)")
          .WithSubRows({}, /*own=*/true),
  });
  return kSection;
}

}  // namespace

absl::Status ParseDaemon(const YamlFields& y, const YAML::Node& root, DaemonConfig* c) {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        y.file(), ": expected a map of settings at the top, got ", DescribeNode(root)));
  }
  const Section<DaemonConfig>& s = DaemonSection();
  RETURN_IF_ERROR(s.CheckKeys(y, root, ""));
  if (root["remote"]) RETURN_IF_ERROR(ParseRemote(y, root["remote"], &c->remote));
  if (root["cache"]) RETURN_IF_ERROR(ParseCache(y, root["cache"], &c->cache));
  if (root["listen"]) RETURN_IF_ERROR(ParseListen(y, root["listen"], &c->listen));
  if (root["engine"]) {
    RETURN_IF_ERROR(ParseEngine(y, root["engine"], c->system.usable_cpus, &c->engine));
  }
  c->memory_budget = DefaultMemoryBudget(c->system);
  RETURN_IF_ERROR(s.ReadFields(y, root, "", c));
  if (root["metrics"]) RETURN_IF_ERROR(MetricsSection().Read(y, root["metrics"], "metrics", c));
  if (root["per_client"]) {
    RETURN_IF_ERROR(PerClientSection().Read(y, root["per_client"], "per_client", c));
  }

  const YAML::Node pl = root["pipelines"];
  if (!pl || pl.IsNull() || (pl.IsMap() && pl.size() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(y.file(), ": field pipelines: no pipelines defined (at least one is needed)"));
  }
  if (!pl.IsMap()) {
    return y.Error("pipelines", pl,
                   absl::StrCat("expected a map of name: settings, got ", DescribeNode(pl)));
  }
  std::set<std::string> names;
  for (const auto& kv : pl) {
    if (!kv.first.IsScalar()) {
      return y.Error("pipelines", kv.first, "pipeline names must be plain names");
    }
    const std::string name = kv.first.Scalar();
    if (!ValidPipelineName(name)) {
      return y.Error(absl::StrCat("pipelines.", name), kv.first,
                     "a pipeline name is 1-128 letters, digits, '-', '_' or '.', starting with a "
                     "letter or digit");
    }
    if (!names.insert(name).second) {
      return y.Error(absl::StrCat("pipelines.", name), kv.first, "duplicate pipeline name");
    }
    PipelineSpec spec;
    RETURN_IF_ERROR(ParsePipeline(y, name, kv.second, *c, &spec));
    c->pipelines.push_back(std::move(spec));
  }
  // After the pipelines: tokens name the pipelines they may open.
  if (root["access"]) RETURN_IF_ERROR(ParseAccess(y, root["access"], *c, &c->access));
  return ValidateDaemonFields(*c);
}

std::vector<FieldDoc> DaemonDocs() { return DaemonSection().Docs(); }

uint64_t DefaultMemoryBudget(const SystemInfo& system) {
  return std::clamp<uint64_t>(system.MemoryLimit() / 4, 256 * kMiB, 16 * kGiB);
}

absl::Status ValidateLogLevel(const std::string& level) {
  static const std::set<std::string> kLevels = {"trace",   "debug", "info",     "warn",
                                                "warning", "error", "critical", "off"};
  if (kLevels.count(level) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "' (trace, debug, info, warn, error, critical, off)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDaemonFields(const DaemonConfig& c) {
  auto bad = [&](const std::string& field, const absl::Status& st) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.source, ": field ", field, ": ", st.message()));
  };
  if (c.listen.unix_path.empty() && c.listen.tcp.empty()) {
    return bad("listen", absl::InvalidArgumentError("needs a unix socket, a TCP address or both"));
  }
  if (!c.listen.unix_path.empty()) {
    if (absl::Status st = ValidateUnixPath(c.listen.unix_path); !st.ok())
      return bad("listen.unix", st);
  }
  if (!c.listen.tcp.empty()) {
    if (absl::Status st = ValidateTcpAddress(c.listen.tcp); !st.ok()) return bad("listen.tcp", st);
  }
  if (!c.listen.data_tcp.empty() && c.listen.data_tcp != "none") {
    if (absl::Status st = ValidateTcpAddress(c.listen.data_tcp); !st.ok()) {
      return bad("listen.data_tcp", st);
    }
  }
  if (!c.listen.tcp.empty() && !IsLoopbackAddress(c.listen.tcp) && !c.listen.tls.enabled() &&
      c.access.tokens.empty() && !c.listen.allow_insecure_tcp) {
    return bad("listen.tcp",
               absl::InvalidArgumentError(absl::StrCat(
                   "'", c.listen.tcp,
                   "' is not a loopback address, and TCP has neither TLS (listen.tls) nor bearer "
                   "tokens (access.tokens): anyone who reaches the port could read every "
                   "dataset. Configure one of them, bind 127.0.0.1, or set "
                   "listen.allow_insecure_tcp: true to serve it anyway")));
  }
  if (c.engine.num_threads < 0 || c.engine.num_threads > kMaxEngineThreads) {
    return bad("threads", absl::InvalidArgumentError(absl::StrCat(
                              "must be within [0, ", kMaxEngineThreads, "] (0: one per core)")));
  }
  if (c.memory_budget < kMinMemoryBudget) {
    return bad("memory_budget", absl::InvalidArgumentError("must be at least 1 MiB"));
  }
  if (absl::Status st = ValidateLogLevel(c.log_level); !st.ok()) return bad("log_level", st);
  if (absl::Status st = ValidateLogFormat(c.log_format); !st.ok()) return bad("log_format", st);
  if (!c.metrics.listen.empty()) {
    if (absl::Status st = ValidateMetricsAddress(c.metrics.listen); !st.ok())
      return bad("metrics.listen", st);
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseConfig(const std::string& yaml, const std::string& file_name,
                                         const std::string& base_dir, const SystemInfo& system) {
  if (base_dir.empty() || base_dir[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        file_name, ": the folder relative paths resolve against must be absolute, got '", base_dir,
        "'"));
  }
  DaemonConfig c;
  c.source = file_name;
  c.system = system;
  const YamlFields fields(file_name, ResolvePath("/", base_dir));
  try {
    YAML::Node root = YAML::Load(yaml);
    RETURN_IF_ERROR(ParseDaemon(fields, root, &c));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s", file_name,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return c;
}

}  // namespace conveyor::server
