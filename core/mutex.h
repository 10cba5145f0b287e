// Mutex, MutexLock and CondVar for the engine: thin wrappers over std::mutex
// and std::condition_variable with abseil's thread-safety annotations, so
// GUARDED_BY documents (and clang can check) the locking.
//
// Why not absl::Mutex: Debian's abseil is built without ThreadSanitizer
// annotations, so TSan cannot see absl::Mutex's synchronisation and reports
// false races; the pthread mutex under std::mutex is understood by every
// sanitizer. The engine's tests run under TSan (scripts/test.sh).
//
// Thread-safety: these are the synchronisation primitives themselves.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace conveyor {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Takes the lock if it is free; true when it did.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
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
  void Wait(Mutex* mu) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Returns true if the deadline passed (a wakeup may still have happened).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    bool timed_out = false;
    if (deadline == absl::InfiniteFuture()) {
      cv_.wait(lock);
    } else {
      const auto until = std::chrono::system_clock::now() +
                         absl::ToChronoNanoseconds(deadline - absl::Now());
      timed_out = cv_.wait_until(lock, until) == std::cv_status::timeout;
    }
    lock.release();
    return timed_out;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace conveyor
