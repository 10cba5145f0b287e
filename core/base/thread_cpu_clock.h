// ThreadCpuNs: CPU time of the calling thread, the clock the decoders'
// max_decode_seconds budget runs on (a loaded host does not make a good
// image fail). Thread-safe.
#pragma once

#include <time.h>

#include <cstdint>

namespace conveyor {

// CPU time of the calling thread in nanoseconds.
inline int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace conveyor
