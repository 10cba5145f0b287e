// CpuContention: runs a function on the calling thread while it shares its
// CPU with busy threads, so its wall time is several times its CPU time (a
// worker descheduled on a loaded host). Tests of CPU-time budgets use it.
//
// Thread-safety: each function is called from one thread; it pins that thread and the
// spinners to the CPU it is on and restores its affinity afterwards.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "core/base/thread_cpu_clock.h"

namespace conveyor::testing {

// Runs fn() on this thread with `spinners` busy threads on the same CPU.
// Returns false (fn not run) when the affinity cannot be set.
inline bool RunContended(int spinners, const std::function<void()>& fn) {
  cpu_set_t before;
  if (pthread_getaffinity_np(pthread_self(), sizeof(before), &before) != 0) return false;
  const int cpu = sched_getcpu();
  if (cpu < 0) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) != 0) return false;
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < spinners; ++i) {
    threads.emplace_back([&] {
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
      started.fetch_add(1);
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
  }
  while (started.load() < spinners) std::this_thread::yield();
  fn();
  stop.store(true);
  for (std::thread& t : threads) t.join();
  pthread_setaffinity_np(pthread_self(), sizeof(before), &before);
  return true;
}

// fn()'s wall time in seconds when run as RunContended runs it; nullopt when
// the affinity cannot be set (fn not run).
inline std::optional<double> ContendedWallSeconds(int spinners, const std::function<void()>& fn) {
  double wall = 0;
  const bool ran = RunContended(spinners, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  if (!ran) return std::nullopt;
  return wall;
}

// A budget for a CPU-time-budget test: three times fn()'s CPU time on this
// thread alone (the best of three runs), and at least 2 ms.
inline double ThriceAloneCpuSeconds(const std::function<void()>& fn) {
  int64_t best_ns = INT64_MAX;
  for (int i = 0; i < 3; ++i) {
    const int64_t t0 = ThreadCpuNs();
    fn();
    best_ns = std::min(best_ns, ThreadCpuNs() - t0);
  }
  return std::max(3e-9 * double(best_ns), 0.002);
}

}  // namespace conveyor::testing
