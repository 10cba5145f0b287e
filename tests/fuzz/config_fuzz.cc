// Fuzz target: bytes as the YAML of conveyord's config file through
// ParseConfig (server/config/config.h), for a fixed machine (8 GiB, no cgroup
// limit). Parsing is pure, so nothing here touches the file system.
// Properties: no sanitizer report and no exception out of the parser; a
// refusal is InvalidArgument naming the file; an accepted config passes
// ValidateDaemonFields, has a budget and at least one pipeline, each with
// a name and a valid transform, and absolute dataset paths.
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "server/config/config.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor::server;
  static const SystemInfo kMachine{uint64_t{8} << 30, 0};
  const std::string yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<DaemonConfig> config = ParseConfig(yaml, "fuzz.yaml", "/etc/conveyor", kMachine);
  if (!config.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(config.status()));
    FUZZ_CHECK(absl::StartsWith(config.status().message(), "fuzz.yaml"));
    return 0;
  }
  FUZZ_CHECK(ValidateDaemonFields(*config).ok());
  FUZZ_CHECK(config->memory_budget > 0);
  FUZZ_CHECK(!config->pipelines.empty());
  std::set<std::string> names;
  for (const PipelineSpec& p : config->pipelines) {
    FUZZ_CHECK(!p.config.name.empty());
    FUZZ_CHECK(names.insert(p.config.name).second);
    FUZZ_CHECK(conveyor::ValidateTransformSpec(p.config.transform).ok());
    for (const DatasetPath& path : DatasetPaths(p)) FUZZ_CHECK(absl::StartsWith(path.path, "/"));
  }
  return 0;
}
