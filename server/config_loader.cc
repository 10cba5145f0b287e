#include "server/config_loader.h"

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/dataset_index.h"
#include "core/posix_error.h"
#include "core/text_escape.h"
#include "core/status_macros.h"
#include "server/yaml_fields.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace fs = std::filesystem;

namespace {

// `p` with the symlinks of its existing prefix resolved (the rest kept as
// written), normalised like ResolvePath; `p` itself when that fails.
std::string RealPath(const std::string& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(fs::path(p), ec);
  if (ec) return p;
  return ResolvePath("/", c.string());
}

}  // namespace

absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path, const SystemInfo& system) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return PosixError(absl::StrCat(path, ": cannot read the config file"),
                      errno != 0 ? errno : EIO);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return PosixError(absl::StrCat(path, ": cannot read the config file"),
                      errno != 0 ? errno : EIO);
  }
  const fs::path abs = fs::absolute(fs::path(path));
  return ParseConfig(text.str(), path, abs.parent_path().string(), system);
}

absl::Status CheckAllowedRoots(const DaemonConfig& config) {
  if (config.allowed_roots.empty()) return absl::OkStatus();
  std::vector<std::string> roots;
  for (const std::string& r : config.allowed_roots) roots.push_back(RealPath(r));
  for (const PipelineSpec& spec : config.pipelines) {
    for (const DatasetPath& dp : DatasetPaths(spec)) {
      const std::string real = RealPath(dp.path);
      bool ok = false;
      for (const std::string& root : roots) ok |= PathIsUnder(real, root);
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", dp.field, ": ",
                         OutsideAllowedRoots(dp.path, real, config.allowed_roots)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> LoadPipelines(
    const DaemonConfig& config) {
  RETURN_IF_ERROR(CheckAllowedRoots(config));
  std::map<std::string, std::shared_ptr<const DatasetIndex>> loaded;
  std::vector<std::shared_ptr<const PipelineConfig>> out;
  for (const PipelineSpec& spec : config.pipelines) {
    const std::string field = absl::StrCat("pipelines.", spec.config.name, ".dataset");
    const DatasetSpec& d = spec.dataset;
    // A folder lists the files of its pipeline's kind (core/media_extensions.h).
    const MediaKind media = spec.config.transform.kind;
    const std::string key = d.kind == DatasetSpec::Kind::kImageFolder
                                ? absl::StrCat(d.Key(), "\nkind:", ToString(media))
                                : d.Key();
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::shared_ptr<const DatasetIndex>> index =
          d.kind == DatasetSpec::Kind::kImageFolder
              ? DatasetIndex::LoadImageFolder(d.root, ExtensionsFor(media))
              : DatasetIndex::LoadListFile(d.list, d.root);
      if (!index.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", field,
                         d.kind == DatasetSpec::Kind::kImageFolder ? ".root" : ".list", ": ",
                         index.status().message()));
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      spdlog::info("dataset {}: {} samples, {} classes, index {:.1f} MiB, loaded in {:.0f} ms",
                   d.kind == DatasetSpec::Kind::kImageFolder ? d.root : d.list, (*index)->size(),
                   (*index)->num_classes(), (*index)->MemoryBytes() / 1048576.0, ms);
      // What the index left out, once per dataset (names escaped, capped).
      if (const std::string ignored = (*index)->ignored().Summary(); !ignored.empty()) {
        spdlog::warn("dataset {}: {}", EscapeText(d.root), ignored);
      }
      it = loaded.emplace(key, *std::move(index)).first;
    }
    auto pc = std::make_shared<PipelineConfig>(spec.config);
    pc->dataset = it->second;
    if (absl::Status st = ValidatePipelineConfig(*pc); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.source, ": field pipelines.", spec.config.name, ": ", st.message()));
    }
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace conveyor::server
