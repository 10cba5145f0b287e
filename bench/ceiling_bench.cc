// ceiling_bench: the in-process ceiling. Runs the train pipeline of the core
// engine over an ImageFolder (read → decode → RandomResizedCrop → flip →
// collate into batch slots) with N worker threads, the consumer releasing
// each batch at once, and prints images/s and CPU-ms per image (process CPU
// time, user + system, all threads) per epoch and their medians. The daemon
// is held against these figures.
//
// --seconds S measures one endless stream instead of epochs: images/s and
// CPU-ms per image over S seconds after --warmup-seconds (no stream ends,
// so no drain at epoch ends: what a small data set needs for thread
// scaling runs, bench/scaling.sh).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench/bench_figures.h"
#include "core/engine/engine.h"

namespace {

using conveyor::bench::Median;
using conveyor::bench::ProcessCpuSeconds;

// --help prints this on stdout and exits 0; a bad argument prints it on
// stderr and exits 2.
constexpr const char* kUsage =
    "usage: ceiling_bench --root DIR [--threads 2] [--batch-size 64] [--epochs 3]\n"
    "       [--warmup-epochs 1] [--size 224] [--credits 4] [--augment train|eval]\n"
    "       [--no-dct-scaling] [--shared-memory] [--json]\n"
    "       [--seconds S [--warmup-seconds 1]]   (one endless stream, timed)\n";

int Usage() {
  std::cerr << kUsage;
  return 2;
}

// One endless stream; counts the images delivered between warm-up's end and
// warm-up + seconds. Returns main's exit code.
int RunTimed(conveyor::Engine& engine,
             const std::shared_ptr<const conveyor::PipelineConfig>& pipeline, uint32_t batch,
             uint32_t credits, bool shared, int threads, double seconds, double warmup_seconds,
             bool json) {
  conveyor::StreamOptions so;
  so.batch_size = batch;
  so.seed = 1;
  so.num_epochs = 0;
  so.num_slots = credits;
  so.memory = shared ? conveyor::SlotMemory::kMemfd : conveyor::SlotMemory::kPrivate;
  auto stream = engine.OpenStream(pipeline, so);
  if (!stream.ok()) {
    std::cerr << stream.status() << "\n";
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto timed_from = start + std::chrono::duration<double>(warmup_seconds);
  const auto timed_to = timed_from + std::chrono::duration<double>(seconds);
  bool timing = false;
  Clock::time_point t0;
  double cpu0 = 0;
  uint64_t images = 0, failed = 0;
  while (true) {
    auto next = (*stream)->Next();
    if (!next.ok() || !next->has_value()) {
      std::cerr << (next.ok() ? absl::InternalError("endless stream ended") : next.status())
                << "\n";
      return 1;
    }
    const auto now = Clock::now();
    if (!timing && now >= timed_from) {  // the batch that crosses warm-up's end is not counted
      timing = true;
      t0 = now;
      cpu0 = ProcessCpuSeconds();
    } else if (timing) {
      images += (*next)->num_samples;
      failed += (*next)->failures.size();
    }
    (void)(*stream)->Release((*next)->slot);
    if (timing && now >= timed_to) {
      const double wall = std::chrono::duration<double>(now - t0).count();
      const double cpu = ProcessCpuSeconds() - cpu0;
      if (json) {
        std::printf(
            "{\"threads\": %d, \"images\": %llu, \"seconds\": %.3f, "
            "\"images_per_s\": %.2f, \"cpu_ms_per_image\": %.4f, \"failed\": %llu}\n",
            threads, static_cast<unsigned long long>(images), wall, images / wall,
            images ? 1000.0 * cpu / images : 0.0, static_cast<unsigned long long>(failed));
      } else {
        std::printf("%d threads, %.1f s: %llu images, %.1f images/s, %.3f CPU-ms/image\n", threads,
                    wall, static_cast<unsigned long long>(images), images / wall,
                    images ? 1000.0 * cpu / images : 0.0);
      }
      return 0;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string root, augment = "train";
  int threads = 2, epochs = 3, warmup = 1, size = 224;
  uint32_t batch = 64, credits = 4;
  bool json = false, dct = true, shared = false;
  double seconds = 0, warmup_seconds = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--root")
      root = next();
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--batch-size")
      batch = std::stoul(next());
    else if (a == "--epochs")
      epochs = std::stoi(next());
    else if (a == "--warmup-epochs")
      warmup = std::stoi(next());
    else if (a == "--size")
      size = std::stoi(next());
    else if (a == "--credits")
      credits = std::stoul(next());
    else if (a == "--augment")
      augment = next();
    else if (a == "--no-dct-scaling")
      dct = false;
    else if (a == "--shared-memory")
      shared = true;
    else if (a == "--json")
      json = true;
    else if (a == "--seconds")
      seconds = std::stod(next());
    else if (a == "--warmup-seconds")
      warmup_seconds = std::stod(next());
    else
      return Usage();
  }
  if (root.empty() || epochs < 1 || seconds < 0 || warmup_seconds < 0) return Usage();

  conveyor::TransformSpec spec;
  spec.mode = augment == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
  spec.output_height = spec.output_width = size;
  spec.dct_scaling = dct;
  auto made = conveyor::ImageFolderPipeline("ceiling", root, spec);
  if (!made.ok()) {
    std::cerr << made.status() << "\n";
    return 1;
  }
  const std::shared_ptr<const conveyor::PipelineConfig> pipeline = *made;
  conveyor::EngineOptions eo;
  eo.num_threads = threads;
  auto engine = conveyor::Engine::Create(eo);
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }

  if (seconds > 0)
    return RunTimed(**engine, pipeline, batch, credits, shared, threads, seconds, warmup_seconds,
                    json);

  std::vector<double> ips, cpu_ms;
  uint64_t failed = 0;
  for (int e = 0; e < warmup + epochs; ++e) {
    conveyor::StreamOptions so;
    so.batch_size = batch;
    so.seed = 1;
    so.first_epoch = static_cast<uint64_t>(e);
    so.num_slots = credits;
    // Slots in a memfd, as the daemon's for unix clients.
    so.memory = shared ? conveyor::SlotMemory::kMemfd : conveyor::SlotMemory::kPrivate;
    const double cpu0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    auto stream = (*engine)->OpenStream(pipeline, so);
    if (!stream.ok()) {
      std::cerr << stream.status() << "\n";
      return 1;
    }
    uint64_t images = 0;
    while (true) {
      auto next = (*stream)->Next();
      if (!next.ok()) {
        std::cerr << next.status() << "\n";
        return 1;
      }
      if (!next->has_value()) break;
      images += (*next)->num_samples;
      failed += (*next)->failures.size();
      (void)(*stream)->Release((*next)->slot);
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = ProcessCpuSeconds() - cpu0;
    if (e < warmup) continue;
    ips.push_back(images / wall);
    cpu_ms.push_back(1000.0 * cpu / images);
    if (!json) {
      std::printf("epoch %d: %llu images, %.1f images/s, %.3f CPU-ms/image\n", e - warmup,
                  static_cast<unsigned long long>(images), images / wall, 1000.0 * cpu / images);
    }
  }
  if (json) {
    std::printf(
        "{\"threads\": %d, \"images\": %zu, \"epochs\": %d, \"images_per_s\": %.2f, "
        "\"images_per_s_min\": %.2f, \"images_per_s_max\": %.2f, "
        "\"cpu_ms_per_image\": %.4f, \"failed\": %llu}\n",
        threads, pipeline->dataset->size(), epochs, Median(ips),
        *std::min_element(ips.begin(), ips.end()), *std::max_element(ips.begin(), ips.end()),
        Median(cpu_ms), static_cast<unsigned long long>(failed));
  } else {
    std::printf("median over %d epochs, %d threads: %.1f images/s, %.3f CPU-ms/image\n", epochs,
                threads, Median(ips), Median(cpu_ms));
  }
  return 0;
}
