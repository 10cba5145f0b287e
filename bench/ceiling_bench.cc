// ceiling_bench: the in-process ceiling. Runs the train pipeline of the core
// engine over an ImageFolder (read → decode → RandomResizedCrop → flip →
// collate into batch slots) with N worker threads, the consumer releasing
// each batch at once, and prints images/s and CPU-ms per image (process CPU
// time, user + system, all threads) per epoch and their medians. The daemon
// is held against these figures.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "core/engine.h"

namespace {

double CpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// --help prints this on stdout and exits 0; a bad argument prints it on
// stderr and exits 2.
constexpr const char* kUsage =
    "usage: ceiling_bench --root DIR [--threads 2] [--batch-size 64] [--epochs 3]\n"
    "       [--warmup-epochs 1] [--size 224] [--credits 4] [--augment train|eval]\n"
    "       [--no-dct-scaling] [--shared-memory] [--json]\n";

int Usage() {
  std::cerr << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root, augment = "train";
  int threads = 2, epochs = 3, warmup = 1, size = 224;
  uint32_t batch = 64, credits = 4;
  bool json = false, dct = true, shared = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    }
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--root") root = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--batch-size") batch = std::stoul(next());
    else if (a == "--epochs") epochs = std::stoi(next());
    else if (a == "--warmup-epochs") warmup = std::stoi(next());
    else if (a == "--size") size = std::stoi(next());
    else if (a == "--credits") credits = std::stoul(next());
    else if (a == "--augment") augment = next();
    else if (a == "--no-dct-scaling") dct = false;
    else if (a == "--shared-memory") shared = true;
    else if (a == "--json") json = true;
    else return Usage();
  }
  if (root.empty() || epochs < 1) return Usage();

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

  std::vector<double> ips, cpu_ms;
  uint64_t failed = 0;
  for (int e = 0; e < warmup + epochs; ++e) {
    conveyor::StreamOptions so;
    so.batch_size = batch;
    so.seed = 1;
    so.first_epoch = static_cast<uint64_t>(e);
    so.num_slots = credits;
    so.shareable_memory = shared;  // slots in a memfd, as the daemon's for unix clients
    const double cpu0 = CpuSeconds();
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
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = CpuSeconds() - cpu0;
    if (e < warmup) continue;
    ips.push_back(images / wall);
    cpu_ms.push_back(1000.0 * cpu / images);
    if (!json) {
      std::printf("epoch %d: %llu images, %.1f images/s, %.3f CPU-ms/image\n", e - warmup,
                  static_cast<unsigned long long>(images), images / wall, 1000.0 * cpu / images);
    }
  }
  if (json) {
    std::printf("{\"threads\": %d, \"images\": %zu, \"epochs\": %d, \"images_per_s\": %.2f, "
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
