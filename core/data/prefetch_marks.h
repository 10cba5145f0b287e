// PrefetchMarks: one flag per sample of a SampleSource, set while a Prefetch
// hint for the sample has been taken by the reader and its Read has not come
// yet. The engine announces a sliding window (each fetch names the next
// samples), so without the marks a source would hint every sample once per
// window step; with them each sample's read-ahead starts once.
//
// A mark is cleared when the sample's Read begins (the read claims what the
// hint started) or when the reader refuses the hint (its read-ahead budget
// is spent: the sample may be hinted again by a later window).
//
// Thread-safety: Take and Clear are safe concurrently from any thread (one
// atomic byte per sample).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace conveyor {

class PrefetchMarks {
 public:
  explicit PrefetchMarks(size_t samples) : marks_(new std::atomic<uint8_t>[samples]()) {}

  // True when this call set the sample's mark: the caller hints it now.
  // REQUIRES: index < samples.
  bool Take(uint64_t index) const {
    std::atomic<uint8_t>& mark = marks_[index];
    return mark.load(std::memory_order_relaxed) == 0 && mark.exchange(1) == 0;
  }
  // The sample's Read began, or its hint was refused. REQUIRES: index < samples.
  void Clear(uint64_t index) const { marks_[index].store(0, std::memory_order_relaxed); }

 private:
  const std::unique_ptr<std::atomic<uint8_t>[]> marks_;
};

}  // namespace conveyor
