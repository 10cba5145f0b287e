// Figures the C++ benchmarks of bench/ report in the same way: the process's
// CPU time and the median of a round's samples.
//
// Thread-safety: plain functions without state; safe from any thread.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <vector>

namespace conveyor::bench {

// User + system CPU seconds of the whole process (every thread) so far.
inline double ProcessCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// The median of `v` (the mean of the middle two for an even count).
// REQUIRES: !v.empty().
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace conveyor::bench
