// ReadFaultHook: the file reader's test seam (core/data/file_reader.h). A unit
// test installs a hook to make chosen reads fail with an errno (EIO, ENOMEM,
// EMFILE, EINTR, ...), return short counts, end early as if the file were
// truncated while being read, or take longer (a slow disk), and then drives
// the real engine over real files. Users cannot reach it: no config field,
// flag or environment variable installs a hook; only code linked into a test
// calls SetReadFaultHookForTesting.
//
// Cost when no hook is installed: one relaxed atomic load per file read.
//
// Thread-safety: OnRead is called concurrently from every thread that reads
// files, so hooks must be safe for concurrent use. Installing and removing
// a hook is not synchronized with reads in flight: install before the reads
// start, remove after they ended (ScopedReadFaultHook in a test's scope
// around the engine).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

#include "absl/time/time.h"

namespace conveyor {

// What one read of one file suffers. The default is no fault.
struct ReadFault {
  // != 0: the file's first pread fails with this errno (before any byte is
  // read); later preads of the same read succeed, so EINTR tests the retry
  // of an interrupted call.
  int error_number = 0;
  // != 0: every pread returns at most this many bytes (short counts).
  uint64_t max_bytes_per_call = 0;
  // >= 0: pread reports the end of the file after this many bytes, as if the
  // file was truncated while it was read.
  int64_t end_after_bytes = -1;
  // Slept on the reading thread before the first pread (a slow disk).
  absl::Duration delay = absl::ZeroDuration();

  bool any() const {
    return error_number != 0 || max_bytes_per_call != 0 || end_after_bytes >= 0 ||
           delay > absl::ZeroDuration();
  }
};

class ReadFaultHook {
 public:
  virtual ~ReadFaultHook() = default;
  // The fault of this read of `path` (the file's name as errors show it:
  // "<dataset root>/<relative path>"). Called once per file read, on the
  // reading thread, after the file was opened and found a regular file.
  virtual ReadFault OnRead(std::string_view path) = 0;
};

// Installs `hook` for every later file read of the process (nullptr removes
// it). REQUIRES: `hook` outlives its installation; no read in flight.
void SetReadFaultHookForTesting(ReadFaultHook* hook);

// Installs a hook for its lifetime (tests).
class ScopedReadFaultHook {
 public:
  explicit ScopedReadFaultHook(ReadFaultHook* hook) { SetReadFaultHookForTesting(hook); }
  ~ScopedReadFaultHook() { SetReadFaultHookForTesting(nullptr); }
  ScopedReadFaultHook(const ScopedReadFaultHook&) = delete;
  ScopedReadFaultHook& operator=(const ScopedReadFaultHook&) = delete;
};

namespace internal {

// The fault for a read of `path`: no fault without a hook; sleeps the
// fault's delay. Used by the file reader only.
ReadFault TakeReadFault(std::string_view path);

// pread(2) with `fault` applied (clears fault->error_number once injected).
// Returns what pread returns, errno set on -1.
ssize_t PreadWithFault(int fd, void* buf, size_t count, off_t offset, ReadFault* fault);

}  // namespace internal
}  // namespace conveyor
