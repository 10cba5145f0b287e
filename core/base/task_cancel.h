// TaskCancelScope: lets long work deep inside a task (a video or audio
// decode) see that the task's stream was cancelled, without the layers in
// between knowing about streams. The engine opens a scope around a decode
// with its stream's stop flag; the decoders' time-budget checks
// (core/decode/ffmpeg/decode_budget.h) call CurrentTaskCancelled() where
// they check the budget, and give the decode up as if it were over time
// (the engine drops the result of a cancelled stream's task).
//
// Thread-safety: the scope is the current thread's (a thread_local
// pointer); the flag it points to may be set from any thread. Scopes nest
// (the inner one wins until it ends).
#pragma once

#include <atomic>

namespace conveyor {

namespace internal {
inline thread_local const std::atomic<bool>* current_task_cancel = nullptr;
}  // namespace internal

class TaskCancelScope {
 public:
  // REQUIRES: *flag outlives the scope.
  explicit TaskCancelScope(const std::atomic<bool>* flag)
      : previous_(internal::current_task_cancel) {
    internal::current_task_cancel = flag;
  }
  ~TaskCancelScope() { internal::current_task_cancel = previous_; }
  TaskCancelScope(const TaskCancelScope&) = delete;
  TaskCancelScope& operator=(const TaskCancelScope&) = delete;

 private:
  const std::atomic<bool>* const previous_;
};

// True when the current thread runs inside a TaskCancelScope whose flag is
// set. Cheap: one thread_local load and one relaxed atomic load.
inline bool CurrentTaskCancelled() {
  const std::atomic<bool>* f = internal::current_task_cancel;
  return f != nullptr && f->load(std::memory_order_relaxed);
}

}  // namespace conveyor
