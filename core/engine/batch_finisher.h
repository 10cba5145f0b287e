// BatchFinisher: an asynchronous last step of a stream's batches between
// collation and delivery, set by the stream's transport (the device
// transport copies each finished slot to GPU memory and converts it there).
// A batch becomes ready for the consumer only once its Finish has called
// `done` with OK; an error ends the stream with it. Batches are still handed
// to the consumer in sequence order whatever order the finishes complete in.
//
// Thread-safety: Attach is called once, before any Finish. Finish is called
// from engine worker threads, with no engine lock held, never concurrently
// for one stream (but not necessarily in sequence order), and must not
// block; `done` may be called from any thread (inside Finish too), exactly
// once per Finish. Drain may be called concurrently with Finish callbacks
// still running; it returns only once every `done` has returned (the engine
// frees the stream then), and no Finish of the stream is called after it.
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

  // Returns once no Finish is in flight any more (their `done` returned):
  // the stream is being destroyed, its slots are about to go. Called once,
  // when the stream's handle is destroyed (after it was cancelled); a
  // finisher may complete what is left with an error to get there.
  virtual void Drain() = 0;
};

}  // namespace conveyor
