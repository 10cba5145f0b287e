// BatchFinisher: an asynchronous last step of a stream's batches between
// collation and delivery, set by the stream's transport (the device
// transport copies each finished slot to GPU memory and converts it there).
// A batch becomes ready for the consumer only once its Finish has called
// `done` with OK; an error ends the stream with it. Batches are still handed
// to the consumer in sequence order whatever order the finishes complete in.
//
// Thread-safety: Attach is called once, before any Finish. Finish is called
// from engine worker threads, never concurrently for one slot, and must not
// block; `done` may be called from any thread, exactly once per Finish.
// Drain may be called concurrently with Finish callbacks still running.
#pragma once

#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "core/engine/batch_layout.h"

namespace conveyor {

class SlotArena;
struct BatchInfo;

class BatchFinisher {
 public:
  virtual ~BatchFinisher() = default;

  // The stream's slots (memory kind, base, slot size) and the layout of its
  // batches, once they exist.
  virtual absl::Status Attach(SlotArena& arena, const BatchLayout& layout) = 0;

  // Starts finishing the batch in `batch.slot`; calls `done` once it may be
  // delivered (OK) or never can be (the error ends the stream).
  virtual void Finish(const BatchInfo& batch, absl::AnyInvocable<void(absl::Status) &&> done) = 0;

  // Returns once no Finish is in flight any more (their `done` ran): the
  // stream is being destroyed, its slots are about to go.
  virtual void Drain() = 0;
};

}  // namespace conveyor
