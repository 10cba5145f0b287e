// CpuContention: runs a function on the calling thread while it shares its
// CPU with busy threads, so its wall time is several times its CPU time (a
// worker descheduled on a loaded host). Tests of CPU-time budgets use it.
//
// Thread-safety: Run is called from one thread; it pins that thread and the
// spinners to the CPU it is on and restores its affinity afterwards.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

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

}  // namespace conveyor::testing
