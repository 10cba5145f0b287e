#include "server/flags.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/config/byte_size.h"

namespace conveyor::server {

namespace fs = std::filesystem;

std::string UsageText() {
  return R"(usage: conveyord [--config FILE] [options]

Conveyor's per-node data-loading daemon: serves the pipelines of FILE over
gRPC on a unix socket (and optionally TCP).

  --config FILE          YAML config (default /etc/conveyor/conveyord.yaml);
                         config/README.md documents every field
  --check-config         validate FILE (and load its datasets), then exit
  --no-data              with --check-config: validate FILE alone (every
                         field and value, no dataset, token or TLS file
                         read), for a host without the data (CI)
  --socket PATH          unix socket (listen.unix); '' disables it
  --tcp HOST:PORT        TCP listener (listen.tcp); port 0 picks a free one;
                         'none' disables it
  --data-tcp HOST:PORT   data socket for TCP clients' batch bytes
                         (listen.data_tcp); default: the TCP host, a free
                         port; 'none' sends batches inside gRPC messages
  --port-file PATH       write the bound TCP port to PATH once serving
                         (removed again at a clean shutdown)
  --threads N            engine worker threads (threads; 0 = one per CPU this
                         process may use: affinity mask and cgroup quota)
  --memory-budget SIZE   slot memory for all streams, e.g. 8GiB or 25%
  --log-level LEVEL      trace, debug, info, warn, error, critical, off
  --prepare PIPELINE     make the re-laid copies (relay_jpeg) of every JPEG
                         of PIPELINE in the cache folder with all threads,
                         then exit: run it before the daemon starts (the
                         folder is one process's at a time)
  --probe TARGET         ask the daemon at TARGET (e.g.
                         unix:///run/conveyor/conveyor.sock) whether it is
                         SERVING (gRPC health check); exit 0 if so, 1 if not
  --version              print the version and exit
  --help                 this text

Test aids (integration tests on machines without a GPU):
  --device-api host-model        DEVICE_MEMORY streams use a host model of the
                                 GPU ("device" memory is a memfd); default cuda
  --host-model-gpus UUID:BYTES[,UUID:BYTES]
                                 the GPUs the host model has

SIGHUP re-reads FILE: pipelines are added, removed or replaced for new
streams (open streams keep theirs), the token files (access.tokens) are
read again and log_level applies at once; a bad file, or one that changes
other settings, is refused with a log line and the running config stays.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when serving fails,
2 for bad flags or a bad config.
)";
}

absl::StatusOr<Flags> ParseFlags(int argc, const char* const* argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::optional<std::string> inline_value;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, ": needs a value"));
      return std::string(argv[++i]);
    };
    auto flag = [&](bool* b) -> absl::Status {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat(arg, ": takes no value"));
      *b = true;
      return absl::OkStatus();
    };
    auto opt = [&](std::optional<std::string>* out) -> absl::Status {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      *out = *v;
      return absl::OkStatus();
    };
    absl::Status st;
    if (arg == "--config" || arg == "-c") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok()) f.config = *v;
    } else if (arg == "--port-file") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok()) f.port_file = *v;
    } else if (arg == "--probe") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok()) f.probe = *v;
    } else if (arg == "--prepare") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok() && v->empty()) st = absl::InvalidArgumentError("--prepare: needs a pipeline");
      if (st.ok()) f.prepare = *v;
    } else if (arg == "--check-config") {
      st = flag(&f.check_config);
    } else if (arg == "--no-data") {
      st = flag(&f.no_data);
    } else if (arg == "--help" || arg == "-h") {
      st = flag(&f.help);
    } else if (arg == "--version") {
      st = flag(&f.version);
    } else if (arg == "--socket") {
      st = opt(&f.socket);
    } else if (arg == "--tcp") {
      st = opt(&f.tcp);
    } else if (arg == "--data-tcp") {
      st = opt(&f.data_tcp);
    } else if (arg == "--threads") {
      st = opt(&f.threads);
    } else if (arg == "--memory-budget") {
      st = opt(&f.memory_budget);
    } else if (arg == "--log-level") {
      st = opt(&f.log_level);
    } else if (arg == "--device-api") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok() && *v != "cuda" && *v != "host-model") {
        st = absl::InvalidArgumentError(
            absl::StrCat("--device-api: expected cuda or host-model, got '", *v, "'"));
      }
      if (st.ok()) f.device_api = *v;
    } else if (arg == "--host-model-gpus") {
      std::optional<std::string> v;
      st = opt(&v);
      if (st.ok()) {
        absl::StatusOr<std::vector<gpu::DeviceInfo>> gpus = ParseHostModelGpus(*v);
        if (gpus.ok()) {
          f.host_model_gpus = *std::move(gpus);
        } else {
          st = absl::InvalidArgumentError(
              absl::StrCat("--host-model-gpus: ", gpus.status().message()));
        }
      }
    } else {
      st = absl::InvalidArgumentError(absl::StrCat("unknown argument '", arg, "' (see --help)"));
    }
    if (!st.ok()) return st;
  }
  if (!f.prepare.empty() && (f.check_config || !f.probe.empty())) {
    return absl::InvalidArgumentError("--prepare: not with --check-config or --probe");
  }
  if (f.no_data && !f.check_config) {
    return absl::InvalidArgumentError("--no-data: only with --check-config");
  }
  if (f.device_api == "host-model" && f.host_model_gpus.empty()) {
    return absl::InvalidArgumentError(
        "--device-api host-model: needs --host-model-gpus UUID:BYTES[,UUID:BYTES]");
  }
  if (f.device_api != "host-model" && !f.host_model_gpus.empty()) {
    return absl::InvalidArgumentError("--host-model-gpus: needs --device-api host-model");
  }
  return f;
}

absl::StatusOr<std::vector<gpu::DeviceInfo>> ParseHostModelGpus(const std::string& text) {
  std::vector<gpu::DeviceInfo> gpus;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const size_t colon = item.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected UUID:BYTES (GPU-1234abcd-…:8GiB), got '", item, "'"));
    }
    gpu::DeviceInfo d;
    d.uuid = std::string(item.substr(0, colon));
    absl::StatusOr<uint64_t> bytes = ParseByteSize(std::string(item.substr(colon + 1)));
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(d.uuid, ": ", bytes.status().message()));
    }
    if (*bytes == 0) return absl::InvalidArgumentError(absl::StrCat(d.uuid, ": no memory"));
    for (const gpu::DeviceInfo& g : gpus) {
      if (g.uuid == d.uuid) return absl::InvalidArgumentError(absl::StrCat(d.uuid, ": twice"));
    }
    d.total_bytes = *bytes;
    d.ordinal = static_cast<int>(gpus.size());
    d.name = absl::StrCat("host model GPU ", d.ordinal);
    gpus.push_back(std::move(d));
  }
  return gpus;
}

absl::Status ApplyFlags(const Flags& f, DaemonConfig* c) {
  auto bad = [](const char* flag, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why));
  };
  if (f.socket)
    c->listen.unix_path =
        f.socket->empty() ? "" : fs::absolute(*f.socket).lexically_normal().string();
  if (f.tcp) c->listen.tcp = (*f.tcp == "none") ? "" : *f.tcp;
  if (f.data_tcp) c->listen.data_tcp = f.data_tcp->empty() ? "none" : *f.data_tcp;
  if (f.threads) {
    int n = 0;
    if (!absl::SimpleAtoi(*f.threads, &n) || n < 0 || n > 1024) {
      return bad("--threads",
                 absl::StrCat("expected an integer within [0, 1024], got '", *f.threads, "'"));
    }
    c->engine.num_threads = n;
  }
  if (f.memory_budget) {
    absl::StatusOr<uint64_t> b = ParseByteSizeOrPercent(*f.memory_budget, c->system.MemoryLimit());
    if (!b.ok()) return bad("--memory-budget", b.status().message());
    c->memory_budget = *b;
  }
  if (f.log_level) {
    if (absl::Status st = ValidateLogLevel(*f.log_level); !st.ok())
      return bad("--log-level", st.message());
    c->log_level = *f.log_level;
  }
  if (!f.port_file.empty() && c->listen.tcp.empty()) {
    return bad("--port-file", "needs a TCP listener (listen.tcp or --tcp)");
  }
  return ValidateDaemonFields(*c);
}

}  // namespace conveyor::server
