// ByteRangeReader: reads byte ranges of named objects — a local file, an
// HTTP(S) URL or an S3 object — so that sources built from containers (tar
// shards) fetch one member with one ranged read wherever the shard lives.
// Implementations: a local one over pread (beside the tar source) and a
// remote one over libcurl's multi interface (HTTP(S) and S3).
//
// Prefetch is a hint: a remote reader may start the request now and keep the
// bytes (bounded read-ahead) for the ReadRange that follows, so decode never
// waits on the network; a local reader ignores it. PrefetchRun hints several
// ranges of one object at once (neighbouring tar members), which a remote
// reader fetches with one request instead of one each.
//
// Error contract: as SampleSource's (core/data/sample_source.h) — a missing
// object or a short range is an error of the sample; errors of the system
// (unreachable host after retries, out of memory) carry IsSystemError's mark
// (core/base/posix_error.h) so the engine retries them and then ends the stream.
// Messages name the object (for URLs without credentials or query secrets).
//
// Asynchronous reads: ReadRangeAsync starts a read and returns at once, its
// `done` called when the bytes are there (core/data/pending_read.h); a reader
// that waits on a network says so with reads_asynchronously(), and sources
// over it then read that way, so no worker waits on the network.
//
// Thread-safety: every method may be called concurrently from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/data/pending_read.h"

namespace conveyor {

class ByteRangeReader {
 public:
  virtual ~ByteRangeReader() = default;

  // The object's size in bytes.
  virtual absl::StatusOr<uint64_t> Size(std::string_view object) const = 0;

  // Replaces *out with bytes [offset, offset + length) of `object`; fewer
  // bytes than asked (the object is shorter) is an error (OutOfRange naming
  // the object), never a silently short buffer. *out's capacity is reused.
  virtual absl::Status ReadRange(std::string_view object, uint64_t offset, uint64_t length,
                                 std::vector<uint8_t>* out) const = 0;

  // Whether reads wait on a network (see above). False: ReadRangeAsync is
  // ReadRange on the caller's thread.
  virtual bool reads_asynchronously() const { return false; }

  // As ReadRange, but returns at once: `done` gets the status once *out
  // holds the range (*out is the read's until then). Returns the handle to
  // cancel the read, or null when done already ran. The default runs
  // ReadRange here and then done.
  virtual std::shared_ptr<PendingRead> ReadRangeAsync(std::string_view object, uint64_t offset,
                                                      uint64_t length, std::vector<uint8_t>* out,
                                                      ReadDone done) const {
    done(ReadRange(object, offset, length, out));
    return nullptr;
  }

  // Hint: a ReadRange of this range will follow soon. False when the
  // reader's read-ahead budget is spent (nothing started: hint again later);
  // true when the read is under way or the hint is ignored.
  virtual bool Prefetch(std::string_view /*object*/, uint64_t /*offset*/,
                        uint64_t /*length*/) const {
    return true;
  }

  struct Range {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  // Hint: a ReadRange of each of `parts` (ranges of `object`, ascending by
  // offset, not overlapping) will follow. As Prefetch's result: false when
  // the read-ahead budget is spent and nothing was started. By default, one
  // Prefetch per part (stopping at the first refusal, which is returned).
  virtual bool PrefetchRun(std::string_view object, std::span<const Range> parts) const {
    for (const Range& r : parts) {
      if (!Prefetch(object, r.offset, r.length)) return false;
    }
    return true;
  }
};

}  // namespace conveyor
