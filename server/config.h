// DaemonConfig: everything conveyord is told at start — where it listens, its
// limits, and the named pipelines it serves — read from one YAML file
// (config/README.md documents every field), then overridden by command-line
// flags. Parsed and validated in one pass that names the bad field
// ("FILE: field pipelines.imagenet.max_batch_size: reason"); afterwards the
// config is a plain value, kept const for the daemon's life.
//
// Paths: relative paths in the file (dataset root/list, allowed_roots,
// listen.unix) resolve against the directory holding the config file, so a
// config and its data can move together. Paths given on the command line
// resolve against the working directory.
//
// Thread-safety: plain values and free functions without shared state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine.h"
#include "core/pipeline_config.h"

namespace conveyor::server {

inline constexpr char kDefaultUnixSocket[] = "/run/conveyor/conveyor.sock";

// Where a pipeline's samples come from. Paths are absolute and normalised.
struct DatasetSpec {
  enum class Kind { kImageFolder, kListFile };
  Kind kind = Kind::kImageFolder;
  std::string root;  // ImageFolder root, or the list's root ("" = the list's directory)
  std::string list;  // list file (kListFile only)

  // Pipelines whose datasets have equal keys share one loaded index.
  std::string Key() const;
};

// One `pipelines.<name>` entry. `config.dataset` stays null until
// LoadPipelines() loads the dataset.
struct PipelineSpec {
  DatasetSpec dataset;
  PipelineConfig config;  // config.name is the pipeline's name
};

struct ListenConfig {
  std::string unix_path = kDefaultUnixSocket;  // "" disables the unix socket
  mode_t unix_mode = 0660;                     // of the socket and its ".fd" sibling
  std::string tcp;                             // "host:port", "" = no TCP listener
  // The batch-data socket of DATA_SOCKET streams (TCP clients): "host:port";
  // "" = the TCP listener's host with a free port (announced to each client
  // in StreamOpened); "none" = no data socket (TCP clients get INLINE
  // batches). Unused without a TCP listener.
  std::string data_tcp;
};

// The address the data socket listens on, or "" for none (see data_tcp).
std::string DataSocketAddress(const ListenConfig& listen);

struct DaemonConfig {
  std::string source;  // the config file, as named on the command line (for messages)
  ListenConfig listen;
  EngineOptions engine;        // engine.num_threads is the `threads` field
  uint64_t memory_budget = 0;  // bytes of batch slots over all streams (resolved, > 0)
  uint32_t max_streams = 64;
  std::vector<std::string> allowed_roots;  // absolute; empty = any root
  std::string log_level = "info";
  double shutdown_timeout_seconds = 5.0;
  std::vector<PipelineSpec> pipelines;  // in file order, names unique
};

// The default memory budget: a quarter of physical memory (or of the
// cgroup's memory limit when lower, as in a container), capped at 16 GiB
// (at least 256 MiB).
uint64_t DefaultMemoryBudget();

// Parses a byte size: a non-negative integer or decimal followed by an
// optional unit — B; KiB/MiB/GiB/TiB (or K/M/G/T, or Ki/Mi/Gi/Ti: powers of
// 1024); KB/MB/GB/TB (powers of 1000). With `allow_percent`, "N%" is N percent
// of physical memory (or of the cgroup's memory limit when lower). InvalidArgument saying what is
// wrong.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text, bool allow_percent = false);

// "trace" … "off": spdlog's level names ("warn" and "warning" both accepted).
absl::Status ValidateLogLevel(const std::string& level);

// Parses and validates `yaml` as the content of `file_name` (used in
// messages); relative paths resolve against `base_dir`.
// InvalidArgument "FILE: field PATH: reason" on the first problem.
absl::StatusOr<DaemonConfig> ParseConfig(const std::string& yaml, const std::string& file_name,
                                         const std::string& base_dir);

// Reads `path` and parses it (relative paths resolve against its directory).
absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path);

// Checks the daemon-wide fields again after command-line overrides (listen,
// threads, memory budget, log level). InvalidArgument naming the field.
absl::Status ValidateDaemonFields(const DaemonConfig& config);

// Loads every distinct dataset once (pipelines with the same dataset share
// the index) and returns the finished, validated pipelines in config order.
// Errors name the config field: "FILE: field pipelines.x.dataset.root: …".
absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> LoadPipelines(
    const DaemonConfig& config);

// Whether `path` is `root` or lies below it (both absolute and normalised).
bool PathIsUnder(const std::string& path, const std::string& root);

}  // namespace conveyor::server
