// The entry points of a fuzz target in tests/fuzz (libFuzzer's interface),
// and a check that aborts with a message when a target's property fails, so
// that libFuzzer keeps the input as a crasher and the replay test fails.
// Each target's .cc defines LLVMFuzzerTestOneInput (and, when it needs
// process-wide state, LLVMFuzzerInitialize). Linked either with libFuzzer
// (-fsanitize=fuzzer, CONVEYOR_FUZZ builds) or with replay_main.cc, which
// runs the target over files given as arguments (every other build).
//
// Thread-safety: libFuzzer calls the target from one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv);

// Aborts naming the broken property when `cond` is false.
#define FUZZ_CHECK(cond)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

namespace conveyor::fuzz {

// FNV-1a of the input: the targets draw their parameters (augmentation
// mode, output size, split points) from it, so that every input stands for
// one fixed run and replays the same way.
inline uint64_t HashBytes(const uint8_t* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

}  // namespace conveyor::fuzz
