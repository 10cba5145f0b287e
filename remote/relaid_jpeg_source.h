// RelaidJpegSource: serves a pipeline's JPEGs from re-laid copies kept in the
// node's object cache (the daemon's `cache` folder; a pipeline's
// `relay_jpeg: true`), so that crops decode only the restart intervals they
// cover (core/decode/jpeg_relayout.h: the same pixels, fewer bytes
// entropy-decoded). Local files and tar members both: any source that can
// name a sample's identity (SampleSource::Identity: path, size, mtime,
// ctime, device, inode; a member's shard and place).
//
// A read first looks for the copy under "relaid-jpeg:" + the sample's
// identity, so a changed file is never served from an old copy (its
// identity changed). Without a copy it reads the original, returns it as it
// is, and offers the bytes to the Relayer, which makes copies on a thread of
// its own at the lowest CPU priority (nice 19): on a busy machine copies
// are made with the CPU the decoders leave, and never delay a read. The
// Relayer's queue holds at most kRelayQueueBytes of offered originals (more
// are dropped, and offered again at their next read); files it cannot
// re-lay (not JPEG, progressive arithmetic, corrupt) are remembered (up to
// kMaxRefusedKeys) and not offered again.
//
// Identity is the inner source's: the copy decodes to the same output, so
// the output cache keys of both are one.
//
// Thread-safety: Read may be called concurrently from every worker; the
// Relayer is safe for concurrent Offer calls and joins its thread when
// destroyed.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/base/mutex.h"
#include "core/data/sample_source.h"
#include "remote/object_cache.h"

namespace conveyor::remote {

inline constexpr uint64_t kRelayQueueBytes = 32ull << 20;
inline constexpr size_t kMaxRefusedKeys = 1u << 20;

// The cache key of the re-laid copy of the sample whose identity is `id`.
std::string RelaidKey(const std::string& id);
// The validators its entry carries (a version tag of the layout, its size).
ObjectValidators RelaidValidators(uint64_t size);

class Relayer {
 public:
  struct Counters {
    uint64_t offered = 0;  // originals queued to be re-laid
    uint64_t made = 0;     // copies written to the cache (if it took them)
    uint64_t refused = 0;  // files that cannot be re-laid
    uint64_t dropped = 0;  // offers over the queue's bytes
  };
  explicit Relayer(std::shared_ptr<ObjectCache> cache);
  ~Relayer();
  Relayer(const Relayer&) = delete;
  Relayer& operator=(const Relayer&) = delete;

  // Queues `bytes` (copied) to be re-laid and kept under `key`, unless the
  // queue is full or the key was refused before.
  void Offer(const std::string& key, std::span<const uint8_t> bytes);
  Counters counters() const;
  // Returns once the queue is empty and no copy is being made (tests, tools).
  void Drain();

 private:
  void Run();

  const std::shared_ptr<ObjectCache> cache_;
  mutable Mutex mu_;
  CondVar work_cv_;  // work queued, or stopping
  CondVar idle_cv_;  // the queue emptied
  struct Job {
    std::string key;
    std::vector<uint8_t> bytes;
  };
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::unordered_set<std::string> refused_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<std::string> pending_ ABSL_GUARDED_BY(mu_);  // queued or being made
  Counters counters_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

class RelaidJpegSource final : public SampleSource {
 public:
  // `samples`: how many samples `inner` has (indices below it have their
  // copy checked once, see Read). REQUIRES: all non-null.
  RelaidJpegSource(std::shared_ptr<const SampleSource> inner, std::shared_ptr<ObjectCache> cache,
                   std::shared_ptr<Relayer> relayer, uint64_t samples);

  // The copy if the cache has it, else the original (offered to be
  // re-laid). The first time a sample's copy is served it is checked
  // against the layout RelayJpeg gives copies (ParseRelaid: headers, one
  // restart interval per MCU, in order, ending the file); a copy that does
  // not match (damaged on disk) is not served: the original is, with a
  // warning naming the sample, and is re-laid, the new copy replacing it.

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override;
  // Copies found damaged (not served) so far.
  uint64_t damaged_copies() const { return damaged_.load(std::memory_order_relaxed); }
  bool reads_asynchronously() const override { return inner_->reads_asynchronously(); }
  std::shared_ptr<PendingRead> ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                         ReadDone done) const override {
    return inner_->ReadAsync(index, out, std::move(done));
  }
  void Prefetch(std::span<const uint64_t> upcoming, bool every_sample) const override {
    inner_->Prefetch(upcoming, every_sample);
  }
  bool Identity(uint64_t index, std::string* out) const override {
    return inner_->Identity(index, out);
  }
  const std::shared_ptr<ObjectCache>& cache() const { return cache_; }
  const std::shared_ptr<const SampleSource>& inner() const { return inner_; }
  const std::shared_ptr<Relayer>& relayer() const { return relayer_; }

 private:
  const std::shared_ptr<const SampleSource> inner_;
  const std::shared_ptr<ObjectCache> cache_;
  const std::shared_ptr<Relayer> relayer_;
  // A bit per sample: its copy was checked (set once, never cleared).
  const uint64_t samples_;
  const std::unique_ptr<std::atomic<uint64_t>[]> checked_;
  mutable std::atomic<uint64_t> damaged_{0};
};

}  // namespace conveyor::remote
