// Deterministic random numbers for Conveyor.
//
// Every random draw in the engine (shuffle order, crop boxes, flips) comes
// from an Rng seeded by a tuple of integers: (seed, epoch) for the sampler and
// (seed, epoch, sample index) for augmentation. The generator is our own
// SplitMix64, so the sequence is identical on every machine, compiler and
// standard library (std::uniform_*_distribution is implementation-defined and
// is never used). Draws of a sample do not depend on which thread runs it or
// when, which is what makes batches byte-identical across runs.
//
// Thread-safety: an Rng is a small value; use one per thread / per sample.
#pragma once

#include <cstdint>

namespace conveyor {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // An Rng for a tuple of keys; distinct tuples give independent streams.
  static Rng ForKeys(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
    uint64_t h = Mix(a ^ 0x9e3779b97f4a7c15ull);
    h = Mix(h ^ Mix(b + 0x632be59bd9b4e019ull));
    h = Mix(h ^ Mix(c + 0x85157af5ull));
    h = Mix(h ^ Mix(d + 0x2545f4914f6cdd1dull));
    return Rng(h);
  }

  uint64_t NextU64() {
    state_ += 0x9e3779b97f4a7c15ull;
    return Mix(state_);
  }

  // Uniform in [0, 1) with 53 bits of precision.
  double NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * NextDouble(); }

  // Uniform integer in [0, bound), unbiased (Lemire's method). REQUIRES: bound > 0.
  uint64_t Below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(NextU64()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(NextU64()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  bool Bernoulli(double p) { return NextDouble() < p; }

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  uint64_t state_;
};

}  // namespace conveyor
