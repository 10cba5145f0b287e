// A compact, immutable list of byte strings (the dataset index's relative
// paths), front- and rear-coded in small blocks.
//
// Dataset paths come sorted or grouped by folder, so a path shares most of
// its bytes with the one before it: "n01440764/n01440764_10026.JPEG" then
// "n01440764/n01440764_10027.JPEG" differ in one byte. Each block of
// kBlockSize strings stores its first string whole and every other one as
// (bytes shared at the front with the previous string, bytes shared at the
// back with it, the bytes in between). An ImageNet-like list of 1.28 M paths
// takes 7-9 bytes a path this way instead of ~30 (bench/index_memory.py).
// Nothing depends on strings repeating: a list of unrelated names costs
// about what plain storage costs (a few bytes of lengths more a string).
//
// Random access decodes one block: Get(i) walks at most kBlockSize - 1
// strings of a few bytes each, far below the cost of reading the sample.
// Strings may hold any bytes (NUL, newlines, bytes >= 0x80): the encoding is
// lengths and raw bytes.
//
// Thread-safety: immutable once built; all const methods are safe for
// concurrent use without external synchronization. The Builder is not
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace conveyor {

class FrontCodedPaths {
 public:
  // Strings per block: the first is stored whole, so a longer block saves a
  // little more and costs more per Get.
  static constexpr size_t kBlockSize = 16;

  // Appends strings in order, then Finish() hands the immutable list over.
  class Builder {
   public:
    void Add(std::string_view s);
    size_t size() const { return count_; }
    // The list of every string added; the builder is left empty.
    FrontCodedPaths Finish();

   private:
    std::string data_;
    std::vector<uint64_t> block_starts_;
    std::string previous_;
    size_t count_ = 0;
  };

  FrontCodedPaths() = default;
  FrontCodedPaths(FrontCodedPaths&&) noexcept = default;
  FrontCodedPaths& operator=(FrontCodedPaths&&) noexcept = default;

  size_t size() const { return count_; }

  // String i. REQUIRES: i < size().
  std::string Get(size_t i) const;
  // String i into *out (its capacity is reused). REQUIRES: i < size().
  void Get(size_t i, std::string* out) const;

  // Heap + object bytes held (capacities, not sizes).
  size_t MemoryBytes() const;

 private:
  std::string data_;                    // the encoded blocks back to back
  std::vector<uint64_t> block_starts_;  // offset in data_ of each block
  size_t count_ = 0;
};

}  // namespace conveyor
