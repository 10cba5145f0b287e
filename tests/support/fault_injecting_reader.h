// FaultInjectingReader: a FileReader (core/data/file_reader.h) that wraps
// another and makes chosen file reads fail with an errno (EIO, ENOMEM,
// EMFILE, EINTR, ...), return short counts, end early as if the file were
// truncated while read, or take longer (a slow disk). A test gives it to
// the engine (EngineOptions::file_reader) or to ReadWholeFile, and drives
// the real read loop over real files; production code never holds one.
//
// Faults are planned by the end of the file's name (as errors show it:
// "<dataset root>/<relative path>"): a read of a path ending in a planned
// suffix gets the first matching plan's fault, for its first `times` reads
// (every read when times < 0); other reads get PlanAll's fault (none by
// default). Reads are counted per path.
//
// Thread-safety: every method may be called concurrently (one mutex).
// Plans may change while reads run; a read keeps the fault it began with.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "core/data/file_reader.h"

namespace conveyor::testing {

// What one read of one file suffers. The default is no fault.
struct ReadFault {
  // != 0: the read's first pread fails with this errno (before any byte is
  // read); its later preads succeed, so EINTR tests the retry of an
  // interrupted call.
  int error_number = 0;
  // != 0: every pread returns at most this many bytes (short counts).
  uint64_t max_bytes_per_call = 0;
  // >= 0: pread reports the end of the file after this many bytes, as if the
  // file was truncated while it was read.
  int64_t end_after_bytes = -1;
  // Slept on the reading thread before the first pread (a slow disk).
  absl::Duration delay = absl::ZeroDuration();
};

ReadFault Errno(int error_number);

class FaultInjectingReader final : public FileReader {
 public:
  // Reads through `base` (which must outlive this reader).
  explicit FaultInjectingReader(const FileReader& base = DefaultFileReader()) : base_(base) {}

  void Plan(const std::string& suffix, ReadFault fault, int times = -1);
  void PlanAll(ReadFault fault);

  // Reads begun of the paths ending in `suffix`.
  int reads_of(const std::string& suffix) const;
  // Reads that got a planned fault (PlanAll's not counted).
  int injected() const;

  void BeginRead(int fd, std::string_view shown) const override;
  ssize_t Pread(int fd, void* buf, size_t count, off_t offset) const override;
  void EndRead(int fd) const override;

 private:
  struct Entry {
    std::string suffix;
    ReadFault fault;
    int times;
  };
  const FileReader& base_;
  mutable std::mutex mu_;
  mutable std::vector<Entry> plans_;  // their `times` count down as reads begin
  ReadFault all_;
  mutable std::map<std::string, int> reads_;
  mutable int injected_ = 0;
  // The fault of each read in progress, by its fd (unique while open).
  mutable std::map<int, ReadFault> open_;
};

}  // namespace conveyor::testing
