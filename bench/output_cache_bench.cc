// output_cache_bench: the `eval` pipeline with and without its output cache
// (`cache_output`, core/engine/output_cache.h), side by side in one run. The
// cached pipeline's cache is filled by one epoch first; then rounds
// alternate one epoch of each (epochs 1, 2, ...: every epoch ≥ 2 of a
// training run), the consumer releasing each batch at once, and the
// images/s of each epoch, their medians and the ratio (cached / uncached)
// are printed. Process CPU-ms per image too (user + system, all threads).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_figures.h"
#include "core/engine/engine.h"

namespace {

using conveyor::bench::Median;
using conveyor::bench::ProcessCpuSeconds;

constexpr const char* kUsage =
    "usage: output_cache_bench --root DIR [--threads 2] [--batch-size 64] [--size 224]\n"
    "       [--rounds 3] [--cache-bytes 4GiB-as-bytes]\n";

struct Epoch {
  double images_per_s = 0;
  double cpu_ms_per_image = 0;
  uint64_t images = 0;
};

// One epoch of `pipeline`; false (with a message) on an error.
bool RunEpoch(conveyor::Engine& engine, const std::shared_ptr<const conveyor::PipelineConfig>& p,
              uint32_t batch, uint64_t epoch, Epoch* out) {
  conveyor::StreamOptions so;
  so.batch_size = batch;
  so.seed = 1;
  so.first_epoch = epoch;
  so.num_slots = 4;
  const double cpu0 = ProcessCpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = engine.OpenStream(p, so);
  if (!stream.ok()) {
    std::cerr << stream.status() << "\n";
    return false;
  }
  uint64_t images = 0;
  while (true) {
    auto next = (*stream)->Next(absl::Seconds(600));
    if (!next.ok()) {
      std::cerr << next.status() << "\n";
      return false;
    }
    if (!next->has_value()) break;
    images += (**next).num_samples;
    if (!(*stream)->Release((**next).slot).ok()) return false;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out->images = images;
  out->images_per_s = images / s;
  out->cpu_ms_per_image = 1e3 * (ProcessCpuSeconds() - cpu0) / std::max<uint64_t>(images, 1);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root;
  int threads = 2, size = 224, rounds = 3;
  uint32_t batch = 64;
  uint64_t cache_bytes = uint64_t{4} << 30;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--root") {
      root = value();
    } else if (a == "--threads") {
      threads = std::stoi(value());
    } else if (a == "--batch-size") {
      batch = static_cast<uint32_t>(std::stoul(value()));
    } else if (a == "--size") {
      size = std::stoi(value());
    } else if (a == "--rounds") {
      rounds = std::stoi(value());
    } else if (a == "--cache-bytes") {
      cache_bytes = std::stoull(value());
    } else if (a == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << kUsage;
      return 2;
    }
  }
  if (root.empty() || threads < 1 || rounds < 1 || batch < 1) {
    std::cerr << kUsage;
    return 2;
  }
  conveyor::TransformSpec t;
  t.mode = conveyor::AugmentMode::kEval;
  t.output_height = t.output_width = size;
  t.resize_size = (size * 256 + 223) / 224;
  auto plain = conveyor::ImageFolderPipeline("eval", root, t);
  if (!plain.ok()) {
    std::cerr << plain.status() << "\n";
    return 1;
  }
  auto cached = std::make_shared<conveyor::PipelineConfig>(**plain);
  cached->name = "eval-cached";
  cached->cache_output = true;
  cached->output_cache = std::make_shared<conveyor::OutputCache>(cache_bytes);
  if (absl::Status st = conveyor::ValidatePipelineConfig(*cached); !st.ok()) {
    std::cerr << st << "\n";
    return 1;
  }
  conveyor::EngineOptions eo;
  eo.num_threads = threads;
  auto engine = conveyor::Engine::Create(eo);
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }
  std::printf("output_cache_bench: %zu images, eval %dx%d, %d threads, batch %u\n",
              static_cast<size_t>((*plain)->dataset->size()), size, size, threads, batch);
  Epoch fill;
  if (!RunEpoch(**engine, cached, batch, 0, &fill)) return 1;
  const conveyor::OutputCache::Stats filled = cached->output_cache->GetStats();
  std::printf("epoch 0 (filling the cache): %.0f images/s; cache %llu samples, %.1f MiB\n",
              fill.images_per_s, static_cast<unsigned long long>(filled.entries),
              filled.bytes / 1048576.0);
  std::vector<double> rate_plain, rate_cached, cpu_plain, cpu_cached;
  for (int r = 0; r < rounds; ++r) {
    Epoch a, b;
    // Alternating: epoch r + 1 of each, uncached first in even rounds.
    const bool plain_first = r % 2 == 0;
    if (!RunEpoch(**engine, plain_first ? *plain : cached, batch, r + 1, plain_first ? &a : &b) ||
        !RunEpoch(**engine, plain_first ? cached : *plain, batch, r + 1, plain_first ? &b : &a)) {
      return 1;
    }
    rate_plain.push_back(a.images_per_s);
    rate_cached.push_back(b.images_per_s);
    cpu_plain.push_back(a.cpu_ms_per_image);
    cpu_cached.push_back(b.cpu_ms_per_image);
    std::printf(
        "round %d epoch %d: uncached %.0f images/s (%.2f CPU-ms/image), cached %.0f "
        "images/s (%.3f CPU-ms/image), ratio %.1fx\n",
        r + 1, r + 1, a.images_per_s, a.cpu_ms_per_image, b.images_per_s, b.cpu_ms_per_image,
        b.images_per_s / a.images_per_s);
  }
  const conveyor::OutputCache::Stats s = cached->output_cache->GetStats();
  std::printf(
      "median: uncached %.0f images/s (%.2f CPU-ms/image), cached %.0f images/s "
      "(%.3f CPU-ms/image): ratio %.1fx (cache hits %llu, misses %llu)\n",
      Median(rate_plain), Median(cpu_plain), Median(rate_cached), Median(cpu_cached),
      Median(rate_cached) / Median(rate_plain), static_cast<unsigned long long>(s.hits),
      static_cast<unsigned long long>(s.misses));
  return 0;
}
