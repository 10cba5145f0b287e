// Happens-before edges that ThreadSanitizer cannot see by itself, declared
// by hand. Debian's gRPC is not built with TSan, so when gRPC hands a
// reactor from the thread that created it to the thread that runs its next
// reaction (through its own, uninstrumented atomics and queues), TSan sees
// two threads touch the reactor with no synchronisation between them. The
// reactor marks the end of its constructor and of each reaction as a
// release, and the start of each reaction as an acquire, on its own
// address: exactly the ordering gRPC guarantees (reactions of one call never
// run concurrently with each other). Outside TSan builds these are no-ops.
//
// Thread-safety: annotations only.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define CONVEYOR_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CONVEYOR_TSAN_ENABLED 1
#endif
#endif

#ifdef CONVEYOR_TSAN_ENABLED
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace conveyor::server {

// What one thread did to *addr before TsanRelease(addr) happens before what
// another does after its TsanAcquire(addr).
inline void TsanRelease(void* addr) {
#ifdef CONVEYOR_TSAN_ENABLED
  __tsan_release(addr);
#else
  (void)addr;
#endif
}

inline void TsanAcquire(void* addr) {
#ifdef CONVEYOR_TSAN_ENABLED
  __tsan_acquire(addr);
#else
  (void)addr;
#endif
}

// Acquire on construction, release on destruction: brackets one reaction.
class TsanReaction {
 public:
  explicit TsanReaction(void* addr) : addr_(addr) { TsanAcquire(addr_); }
  ~TsanReaction() { TsanRelease(addr_); }
  TsanReaction(const TsanReaction&) = delete;
  TsanReaction& operator=(const TsanReaction&) = delete;

 private:
  void* const addr_;
};

}  // namespace conveyor::server
