// AwaitRead: an asynchronous read (SampleSource::ReadAsync,
// ByteRangeReader::ReadRangeAsync) waited for on the calling thread, for the
// blocking Read of a source whose reads are asynchronous.
//
// Thread-safety: the caller blocks until the read's done ran (on any
// thread); nothing is shared with other callers.
#pragma once

#include <memory>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/base/mutex.h"
#include "core/data/pending_read.h"

namespace conveyor {

// Starts the read with `start` (given the done to pass on) and returns its
// result once done ran.
inline absl::Status AwaitRead(absl::FunctionRef<std::shared_ptr<PendingRead>(ReadDone)> start) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  absl::Status result;
  start([&](absl::Status st) {
    MutexLock lock(&mu);
    result = std::move(st);
    ready = true;
    cv.SignalAll();
  });
  MutexLock lock(&mu);
  while (!ready) cv.Wait(&mu);
  return result;
}

}  // namespace conveyor
