// AvDecodeBudget: the per-sample time budget (max_decode_seconds) of the
// FFmpeg video and audio decoders, on the images' clock: the CPU time of the
// thread that decodes (core/base/thread_cpu_clock.h), so a loaded host that
// deschedules a worker does not make a good file fail.
//
// The budget is checked where the wall-clock deadline was: FFmpeg's
// interrupt callback, the in-memory reader (core/decode/ffmpeg/memory_input.h) and the
// decoders' loops between packets. Every loop a hostile file can keep busy
// runs on that thread (FFmpeg's own threads are off, the bytes are in
// memory, nothing blocks), so its CPU time grows as fast as its wall time
// did on an idle host. A wall-clock backstop of kWallFactor times the
// budget stays for work this thread would wait for without running itself
// (it never should): past it the budget is spent too.
//
// A decode of a stream that was cancelled meanwhile counts as spent at the
// same checks (core/base/task_cancel.h), so a cancel ends it within a packet.
//
// Thread-safety: construct and check on the same thread (the clock is that
// thread's); a copy is a plain value.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/base/task_cancel.h"
#include "core/base/thread_cpu_clock.h"

namespace conveyor {

class AvDecodeBudget {
 public:
  // The wall-clock backstop, in multiples of the CPU budget.
  static constexpr double kWallFactor = 10.0;

  // No limit.
  AvDecodeBudget() = default;

  // `seconds` of this thread's CPU time from now (and kWallFactor times as
  // much wall time). seconds <= 0: no limit.
  static AvDecodeBudget StartNow(double seconds) {
    AvDecodeBudget b;
    if (!(seconds > 0)) return b;
    b.cpu_deadline_ns_ = ThreadCpuNs() + static_cast<int64_t>(seconds * 1e9);
    b.wall_deadline_ = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(seconds * kWallFactor));
    return b;
  }

  bool limited() const { return cpu_deadline_ns_ != kNever; }

  // True once this thread has used the budget's CPU time, or the backstop's
  // wall time has passed.
  // A cancelled stream's decode (core/base/task_cancel.h) is given up here too.
  bool spent() const {
    if (CurrentTaskCancelled()) return true;
    if (!limited()) return false;
    return ThreadCpuNs() > cpu_deadline_ns_ || std::chrono::steady_clock::now() > wall_deadline_;
  }

 private:
  static constexpr int64_t kNever = INT64_MAX;
  int64_t cpu_deadline_ns_ = kNever;
  std::chrono::steady_clock::time_point wall_deadline_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace conveyor
