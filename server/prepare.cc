#include "server/prepare.h"

#include <chrono>
#include <iostream>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/text_escape.h"
#include "remote/relay_prepare.h"
#include "server/config/system_cpus.h"

namespace conveyor::server {

namespace {

constexpr int kExitUsage = 2;

std::string Describe(const remote::PrepareCounts& c) {
  return absl::StrFormat(
      "%d of %d samples: %d copies made, %d already there, %d not re-laid (not JPEG, or one "
      "that cannot be), %d not kept (cache full), %d unreadable",
      c.made + c.present + c.not_relaid + c.not_kept + c.unreadable, c.samples, c.made, c.present,
      c.not_relaid, c.not_kept, c.unreadable);
}

}  // namespace

int RunPrepare(const DaemonConfig& config,
               const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines,
               const std::string& name) {
  const PipelineSpec* spec = nullptr;
  for (const PipelineSpec& s : config.pipelines) {
    if (s.config.name == name) spec = &s;
  }
  if (spec == nullptr) {
    std::vector<std::string> names;
    for (const PipelineSpec& s : config.pipelines) names.push_back(s.config.name);
    std::cerr << "conveyord: --prepare: " << EscapeText(config.source) << " has no pipeline '"
              << EscapeText(name) << "' (it has: " << EscapeText(absl::StrJoin(names, ", "))
              << ")\n";
    return kExitUsage;
  }
  if (!spec->relay_jpeg) {
    std::cerr << "conveyord: --prepare: pipeline '" << EscapeText(name)
              << "' has no relay_jpeg: true: there is nothing to prepare\n";
    return kExitUsage;
  }
  const remote::RelaidJpegSource* source = nullptr;
  const PipelineConfig* pipeline = nullptr;
  for (const auto& p : pipelines) {
    if (p->name != name) continue;
    pipeline = p.get();
    source = dynamic_cast<const remote::RelaidJpegSource*>(p->source.get());
  }
  if (source == nullptr) {
    // LoadPipelines found the folder held (and said so): it reads without
    // copies rather than not at all, which is not what --prepare is for.
    std::cerr << "conveyord: --prepare: the cache folder " << EscapeText(config.cache.dir)
              << " is held by another process (a running conveyord?): stop it first, or let "
                 "its reads make the copies\n";
    return kExitUsage;
  }
  uint32_t threads = static_cast<uint32_t>(config.engine.num_threads);
  if (threads == 0) {
    std::string why;
    threads = static_cast<uint32_t>(
        UsableCpus(AffinityCpuCount(), CgroupCpuQuota(""),
                   static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), &why));
  }
  const uint64_t samples = pipeline->dataset->size();
  std::cout << "conveyord: preparing pipeline " << EscapeText(name) << ": re-laid copies of "
            << samples << " samples into " << EscapeText(config.cache.dir) << " with " << threads
            << " threads\n"
            << std::flush;
  const auto start = std::chrono::steady_clock::now();
  const remote::PrepareCounts c = remote::PrepareRelaidCopies(
      *source, samples, threads, [](const remote::PrepareCounts& so_far) {
        std::cout << "  " << Describe(so_far) << "\n" << std::flush;
      });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "conveyord: prepared pipeline " << EscapeText(name) << ": " << Describe(c)
            << absl::StrFormat(", in %.1f s", seconds) << "\n";
  return 0;
}

}  // namespace conveyor::server
