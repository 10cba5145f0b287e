// PendingRead: the handle of an asynchronous read (SampleSource::ReadAsync,
// ByteRangeReader::ReadRangeAsync): lets its starter cancel it and see how
// far it got, for statistics of reads that make no progress.
//
// The read's `done` callback (given when the read was started) runs exactly
// once, from any thread, never under a lock of whoever started the read:
// with the read's result, or with CANCELLED promptly after Cancel when it had
// not run yet. The bytes belong to the read's output buffer only once done
// ran; before, the starter must not touch that buffer.
//
// Thread-safety: Cancel and progress may be called concurrently from any
// thread, any number of times, also after done ran (Cancel then does
// nothing). progress never blocks on the network nor takes a lock that a
// read's completion holds while calling out.
#pragma once

#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

namespace conveyor {

// The completion of an asynchronous read (see above).
using ReadDone = absl::AnyInvocable<void(absl::Status)>;

class PendingRead {
 public:
  virtual ~PendingRead() = default;

  // Ends the read: done runs with CANCELLED (at once, on this thread, unless
  // it ran or is running already); the bytes that arrive later are dropped.
  virtual void Cancel() = 0;

  struct Progress {
    std::string object;           // what is read, redacted (no credentials, no query)
    std::string host;             // host[:port] it is read from ("" when local)
    uint64_t bytes_received = 0;  // so far (of the current attempt)
  };
  virtual Progress progress() const = 0;
};

}  // namespace conveyor
