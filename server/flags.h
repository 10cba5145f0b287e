// conveyord's command line: the flags (ParseFlags, UsageText) and how they
// override the config file's fields (ApplyFlags, also used by each reload:
// server/reloader.h), validated once with the rest of the config.
//
// Thread-safety: free functions without shared state; Flags is a value.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/gpu/device_api.h"
#include "server/config/config.h"

namespace conveyor::server {

struct Flags {
  std::string config = "/etc/conveyor/conveyord.yaml";
  bool check_config = false;
  // With check_config: the file alone (schema and every field's value), no
  // dataset, token or TLS file read (server/check_config.h).
  bool no_data = false;
  bool help = false;
  bool version = false;
  std::string port_file;
  std::string probe;  // --probe TARGET: health-check a running daemon and exit
  // --prepare PIPELINE: make the re-laid JPEG copies of a relay_jpeg
  // pipeline in the cache folder, then exit (remote/relay_prepare.h).
  std::string prepare;
  // Overrides of config fields (unset: keep the file's value).
  std::optional<std::string> socket;         // listen.unix ("" disables)
  std::optional<std::string> tcp;            // listen.tcp ("" or "none" disables)
  std::optional<std::string> data_tcp;       // listen.data_tcp ("none" disables)
  std::optional<std::string> threads;        // threads
  std::optional<std::string> memory_budget;  // memory_budget
  std::optional<std::string> log_level;      // log_level
  // Test aid: the device API behind DEVICE_MEMORY streams. "cuda" (the
  // default: the CUDA runtime, or "none" in a build without CUDA) or
  // "host-model" (core/gpu/host_device_api.h: "device" memory is a memfd, for
  // integration tests on machines without a GPU) with the GPUs it models
  // (--host-model-gpus UUID:BYTES[,UUID:BYTES]).
  std::string device_api = "cuda";
  std::vector<gpu::DeviceInfo> host_model_gpus;
};

// "UUID:BYTES[,UUID:BYTES]" (BYTES a byte size: 8GiB) as the GPUs of the
// host model, named "host model GPU <i>", ordinals in order.
// InvalidArgument naming what is wrong.
absl::StatusOr<std::vector<gpu::DeviceInfo>> ParseHostModelGpus(const std::string& text);

// Accepts "--flag value" and "--flag=value". InvalidArgument naming the flag.
absl::StatusOr<Flags> ParseFlags(int argc, const char* const* argv);
std::string UsageText();

// Applies the overrides of `flags` to `config` and validates the result.
absl::Status ApplyFlags(const Flags& flags, DaemonConfig* config);

}  // namespace conveyor::server
