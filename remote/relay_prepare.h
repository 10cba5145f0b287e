// PrepareRelaidCopies: makes the re-laid copy (remote/relaid_jpeg_source.h)
// of every JPEG of a relay_jpeg pipeline ahead of its first epoch, with
// several threads at normal priority, so that even epoch 1 crops decode
// from copies (`conveyord --prepare PIPELINE`: a one-shot run before the
// daemon starts, e.g. systemd's ExecStartPre or a Kubernetes init
// container). Copies already in the cache are left as they are; files that
// cannot be re-laid (not JPEG, arithmetic coding, corrupt) or read are
// counted, never fatal.
//
// Thread-safety: one call at a time per source; it runs `threads` threads
// of its own and returns when they are done.
#pragma once

#include <cstdint>
#include <functional>

#include "remote/relaid_jpeg_source.h"

namespace conveyor::remote {

struct PrepareCounts {
  uint64_t samples = 0;     // of the dataset
  uint64_t made = 0;        // copies written now
  uint64_t present = 0;     // copies already in the cache
  uint64_t not_relaid = 0;  // not JPEG, or a JPEG that cannot be re-laid
  uint64_t not_kept = 0;    // made, but the cache did not keep them (full)
  uint64_t unreadable = 0;  // the file could not be read (or has no identity)
};

// Over samples [0, samples) of `source`; `progress` (may be empty) is
// called from the calling thread about once a second with the counts so
// far. REQUIRES: threads >= 1.
PrepareCounts PrepareRelaidCopies(const RelaidJpegSource& source, uint64_t samples,
                                  uint32_t threads,
                                  const std::function<void(const PrepareCounts&)>& progress);

}  // namespace conveyor::remote
