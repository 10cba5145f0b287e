#include "core/data/read_fault_hook.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

#include "absl/time/clock.h"

namespace conveyor {
namespace {

std::atomic<ReadFaultHook*> g_hook{nullptr};

}  // namespace

void SetReadFaultHookForTesting(ReadFaultHook* hook) {
  g_hook.store(hook, std::memory_order_release);
}

namespace internal {

ReadFault TakeReadFault(std::string_view path) {
  ReadFaultHook* hook = g_hook.load(std::memory_order_relaxed);
  if (hook == nullptr) return ReadFault();
  std::atomic_thread_fence(std::memory_order_acquire);
  ReadFault fault = hook->OnRead(path);
  if (fault.delay > absl::ZeroDuration()) absl::SleepFor(fault.delay);
  return fault;
}

ssize_t PreadWithFault(int fd, void* buf, size_t count, off_t offset, ReadFault* fault) {
  if (fault->error_number != 0) {
    errno = fault->error_number;
    fault->error_number = 0;
    return -1;
  }
  if (fault->max_bytes_per_call != 0) {
    count = static_cast<size_t>(std::min<uint64_t>(count, fault->max_bytes_per_call));
  }
  if (fault->end_after_bytes >= 0) {
    const int64_t left = fault->end_after_bytes - static_cast<int64_t>(offset);
    if (left <= 0) return 0;
    count = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(count), left));
  }
  return ::pread(fd, buf, count, offset);
}

}  // namespace internal
}  // namespace conveyor
