#include "remote/relay_prepare.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/decode/jpeg_relayout.h"

namespace conveyor::remote {

namespace {

struct AtomicCounts {
  std::atomic<uint64_t> made{0}, present{0}, not_relaid{0}, not_kept{0}, unreadable{0};
  PrepareCounts Load(uint64_t samples) const {
    PrepareCounts c;
    c.samples = samples;
    c.made = made.load();
    c.present = present.load();
    c.not_relaid = not_relaid.load();
    c.not_kept = not_kept.load();
    c.unreadable = unreadable.load();
    return c;
  }
};

void PrepareOne(const RelaidJpegSource& source, uint64_t index, std::vector<uint8_t>* bytes,
                AtomicCounts* counts) {
  ObjectCache& cache = *source.cache();
  std::string id;
  if (!source.inner()->Identity(index, &id)) {
    ++counts->unreadable;
    return;
  }
  const std::string key = RelaidKey(id);
  if (const std::optional<ObjectValidators> v = cache.ValidatorsOf(key);
      v.has_value() && v->etag == RelaidValidators(0).etag) {
    ++counts->present;
    return;
  }
  if (!source.inner()->Read(index, bytes).ok()) {
    ++counts->unreadable;
    return;
  }
  absl::StatusOr<std::vector<uint8_t>> copy = RelayJpeg(*bytes);
  if (!copy.ok()) {
    ++counts->not_relaid;
    return;
  }
  const ObjectValidators v = RelaidValidators(copy->size());
  cache.Put(key, v, *copy);
  const std::optional<ObjectValidators> kept = cache.ValidatorsOf(key);
  ++(kept.has_value() && *kept == v ? counts->made : counts->not_kept);
}

}  // namespace

PrepareCounts PrepareRelaidCopies(const RelaidJpegSource& source, uint64_t samples,
                                  uint32_t threads,
                                  const std::function<void(const PrepareCounts&)>& progress) {
  AtomicCounts counts;
  std::atomic<uint64_t> next{0};
  std::atomic<uint32_t> running{threads};
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (uint32_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::vector<uint8_t> bytes;  // one buffer per thread, reused
      for (uint64_t i = next++; i < samples; i = next++) PrepareOne(source, i, &bytes, &counts);
      --running;
    });
  }
  auto last = std::chrono::steady_clock::now();
  while (running.load() != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (progress && std::chrono::steady_clock::now() - last >= std::chrono::seconds(1)) {
      last = std::chrono::steady_clock::now();
      progress(counts.Load(samples));
    }
  }
  for (std::thread& t : pool) t.join();
  return counts.Load(samples);
}

}  // namespace conveyor::remote
