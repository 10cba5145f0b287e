// Mutex, MutexLock and CondVar for the engine: thin wrappers over std::mutex
// and std::condition_variable with abseil's thread-safety annotations, so
// GUARDED_BY documents (and clang's -Wthread-safety checks) the locking.
//
// Why not absl::Mutex: Debian's abseil is built without ThreadSanitizer
// annotations, so TSan cannot see absl::Mutex's synchronisation and reports
// false races; the pthread mutex under std::mutex is understood by every
// sanitizer. The engine's tests run under TSan (scripts/test.sh).
//
// Debug builds (!NDEBUG) remember the owning thread, so AssertHeld() really
// checks; release builds keep std::mutex's cost and AssertHeld() only informs
// the static analysis.
//
// Thread-safety: these are the synchronisation primitives themselves.
#pragma once

#include <atomic>
#include <cassert>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace conveyor {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_.lock();
    SetOwner();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    ClearOwner();
    mu_.unlock();
  }
  // Takes the lock if it is free; true when it did.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    if (!mu_.try_lock()) return false;
    SetOwner();
    return true;
  }
  // Tells the analysis (and, in debug builds, checks) that the calling
  // thread holds this mutex. Used where one mutex is reached by two names
  // (the scheduler's mu_ and a stream's reference to it).
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {
#ifndef NDEBUG
    assert(owner_.load(std::memory_order_relaxed) == std::this_thread::get_id());
#endif
  }

 private:
  friend class CondVar;
  void SetOwner() {
#ifndef NDEBUG
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
#endif
  }
  void ClearOwner() {
#ifndef NDEBUG
    owner_.store(std::thread::id(), std::memory_order_relaxed);
#endif
  }

  std::mutex mu_;
#ifndef NDEBUG
  std::atomic<std::thread::id> owner_{};
#endif
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // REQUIRES: *mu is held; it is held again on return.
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->ClearOwner();
    cv_.wait(lock);
    mu->SetOwner();
    lock.release();
  }
  // Returns true if the deadline passed (a wakeup may still have happened).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline == absl::InfiniteFuture()) {
      Wait(mu);
      return false;
    }
    const auto until =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(deadline - absl::Now());
    return WaitUntil(mu, until);
  }
  // As WaitWithDeadline, with a deadline on the monotonic clock (MonotonicNanos).
  bool WaitUntilMonotonic(Mutex* mu, uint64_t deadline_ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::time_point(
                             std::chrono::nanoseconds(static_cast<int64_t>(deadline_ns))));
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    mu->ClearOwner();
    const bool timed_out = cv_.wait_until(lock, until) == std::cv_status::timeout;
    mu->SetOwner();
    lock.release();
    return timed_out;
  }

  std::condition_variable cv_;
};

}  // namespace conveyor
