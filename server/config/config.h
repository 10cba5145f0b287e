// DaemonConfig: everything conveyord is told at start — where it listens, its
// limits, and the named pipelines it serves — parsed from one YAML document
// (config/README.md documents every field), then overridden by command-line
// flags. Parsed and validated in one pass that names the bad field
// ("FILE: field pipelines.imagenet.max_batch_size: reason"); afterwards the
// config is a plain value, kept const for the daemon's life.
//
// Parsing is pure: ParseConfig reads no file, stats nothing and resolves no
// symlink. What it needs to know about the machine (memory, for the default
// budget and "N%" sizes) comes in a SystemInfo that the daemon probes once.
// Everything that touches the disk — reading the config file, checking that
// dataset paths exist and that symlinks keep them under allowed_roots,
// loading the datasets — is server/config/loader.h.
//
// Paths: relative paths in the file (dataset root/list, allowed_roots,
// listen.unix) resolve lexically against the directory holding the config
// file, so a config and its data can move together. Paths given on the
// command line resolve against the working directory.
//
// The fields are declared once, section by section (server/config/schema.h;
// the parsers in server/config/*_section.cc); config/README.md's field tables
// are checked against those declarations (server/config/config_doc.h).
//
// Thread-safety: plain values and free functions without shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/engine/pipeline_config.h"
#include "remote/object_cache.h"
#include "remote/remote_options.h"
#include "server/access/listen_config.h"
#include "server/access/token_identifier.h"
#include "server/config/dataset_spec.h"
#include "server/config/system_memory.h"
#include "server/service/client_limits.h"

namespace conveyor::server {

// The Prometheus endpoint (the `metrics` section; server/ops/metrics_http_server.h).
struct MetricsConfig {
  // "IPV4:PORT" or "[IPV6]:PORT" of the HTTP listener serving /metrics;
  // "" = no endpoint (the default). Port 0 picks a free one (logged).
  std::string listen;
};

struct DaemonConfig {
  std::string source;  // the config file, as named on the command line (for messages)
  ListenConfig listen;
  AccessConfig access;
  EngineOptions engine;        // engine.num_threads is the `threads` field
  uint64_t memory_budget = 0;  // bytes of batch slots over all streams (resolved, > 0)
  // Device bytes (rings and staging buffers) the DEVICE_MEMORY streams on
  // one GPU may hold together, the same figure for each GPU; 0 = a quarter
  // of the GPU's memory (server/transport/device/gpu_budget.h).
  uint64_t gpu_memory_budget = 0;
  uint32_t max_streams = 64;
  std::vector<std::string> allowed_roots;  // absolute; empty = any root
  std::string log_level = "info";
  std::string log_format = "text";  // "text" or "json" (one object per line)
  MetricsConfig metrics;
  double shutdown_timeout_seconds = 5.0;
  // A stream whose client holds slots without releasing any while nothing
  // new is produced for this long is ended (DEADLINE_EXCEEDED); 0 = never.
  double stream_idle_timeout_seconds = 300.0;
  remote::RemoteOptions remote;         // the `remote` section: HTTP(S)/S3 reads
  remote::CacheOptions cache;           // the `cache` section: dir "" = no cache
  ClientLimits per_client;              // per_client.*: what one client may hold; 0 = no limit
  std::vector<PipelineSpec> pipelines;  // in file order, names unique
  SystemInfo system;                    // the machine "N%" sizes were taken of
};

// The default memory budget: a quarter of the memory this process may use
// (SystemInfo::MemoryLimit), capped at 16 GiB (at least 256 MiB).
uint64_t DefaultMemoryBudget(const SystemInfo& system);

// "trace" … "off": spdlog's level names ("warn" and "warning" both accepted).
absl::Status ValidateLogLevel(const std::string& level);

// Parses and validates `yaml` as the content of `file_name` (used in
// messages); relative paths resolve lexically against `base_dir`, which must
// be absolute. "N%" sizes and the default memory budget are taken of
// `system`. Touches no file system: dataset paths need not exist yet, and
// allowed_roots is checked on the paths as written (".." folded); symlinks
// are checked when the datasets load. InvalidArgument "FILE: field PATH:
// reason" on the first problem.
absl::StatusOr<DaemonConfig> ParseConfig(const std::string& yaml, const std::string& file_name,
                                         const std::string& base_dir, const SystemInfo& system);

// Checks the daemon-wide fields again after command-line overrides (listen,
// threads, memory budget, log level). InvalidArgument naming the field.
absl::Status ValidateDaemonFields(const DaemonConfig& config);

}  // namespace conveyor::server
