// Stream: one ordered sequence of batches of a pipeline for one consumer
// (a rank of a training job), produced by the engine's shared worker pool.
//
// Batch k of an epoch holds this rank's samples kB … kB+B−1 of that epoch
// (see core/data/sampler.h for which samples a rank gets), less the samples that
// failed under ErrorPolicy::kSkip. Every batch is written into one slot of the
// stream's SlotArena; the consumer owns the slot from TryNext/Next until it
// calls Release(slot). The stream never holds more slots than
// StreamOptions::num_slots: when the consumer holds them all, the stream's
// work stops (backpressure) while other streams go on.
//
// Thread-safety: all methods are safe to call concurrently from any thread.
// The ready callback is invoked without any engine lock held, from a worker,
// from the thread calling Release/Cancel, or from the thread of a finisher's
// `done`; it must not destroy the Stream handle (whose destructor drains
// the finisher).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/data/sampler.h"
#include "core/engine/batch_finisher.h"
#include "core/engine/batch_layout.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/slot_arena.h"
#include "core/engine/slot_memory.h"
#include "core/engine/stats.h"

namespace conveyor {

struct StreamOptions {
  uint32_t batch_size = 64;
  uint64_t seed = 0;
  uint64_t first_epoch = 0;
  uint64_t num_epochs = 1;  // 0: endless
  uint32_t rank = 0;
  uint32_t world_size = 1;
  bool shuffle = true;
  // Sampler remainder rule (core/data/sampler.h): pad by wrapping, or drop.
  bool drop_last = false;
  // Batches the stream may hold at once (in production, ready, or held by the
  // consumer): the consumer's credits. Bounds the stream's memory.
  uint32_t num_slots = 4;
  // Resume: samples of first_epoch's global order that all ranks together
  // already consumed (BatchInfo::offset of the last batch the trainer took,
  // possibly saved at another world size). See core/data/sampler.h.
  uint64_t epoch_offset = 0;
  // > 0: the stream ends after this many batches (its last epoch may be
  // left mid-way); 0: after its epochs. With epoch_offset it makes a stream
  // of any range of a rank's batches (core/engine/stream_plan.h).
  uint64_t max_batches = 0;
  // The kind of memory of the stream's slots (core/engine/slot_memory.h):
  // a shared kind puts them in a memfd that can be handed to another process.
  SlotMemory memory = SlotMemory::kPrivate;
  // The transport's last asynchronous step of each batch between collation
  // and delivery (core/engine/batch_finisher.h), or null: a batch is ready
  // once collated. A slot being finished is still the stream's (it counts
  // against num_slots like a ready one).
  std::shared_ptr<BatchFinisher> finisher;
  // Host slots hold uint8 samples in the pipeline's layout even when the
  // pipeline's dtype is float32/float16: the decoders skip the conversion
  // and normalisation, which the finisher does (on the GPU). Image and
  // video pipelines only (video is uint8 anyway).
  bool collate_uint8 = false;
  // Fair sharing of the worker pool (core/engine/scheduler.h): the streams
  // of one `client` form one group, and under contention the groups' shares
  // of the workers' CPU time are in proportion to their weights. "" : the
  // stream is a group of its own. The service passes the client's identity
  // (its per-client key) and its configured weight; the engine never
  // interprets the key.
  std::string client;
  double weight = 1.0;  // > 0 and finite
};

struct SampleFailure {
  uint64_t sample_index = 0;  // index in the dataset
  std::string path;           // relative path in the dataset, escaped (core/base/text_escape.h)
  std::string reason;         // escaped likewise
};

struct BatchInfo {
  uint64_t sequence = 0;  // 0, 1, 2, … over the whole stream
  uint64_t epoch = 0;
  uint64_t batch_in_epoch = 0;  // k
  uint64_t position = 0;        // this rank's samples of `epoch` covered through this batch
  uint64_t epoch_samples = 0;   // this rank's samples in the epoch (in this stream)
  // Samples of the epoch's global order consumed by all ranks once every rank
  // took its batch k: the resume point (StreamOptions::epoch_offset).
  uint64_t offset = 0;
  uint32_t slot = 0;
  uint32_t num_samples = 0;  // images in the slot (batch_size less failures, or a short last batch)
  bool end_of_epoch = false;  // the last batch of its epoch
  std::vector<SampleFailure> failures;
};

class Scheduler;
class StreamMachine;
struct StreamPlan;

class Stream {
 public:
  // Cancels the stream if it is still running and drops the batches not
  // taken; the engine lets go of the stream (and its memory, once no task of
  // it runs) on every path: mid-stream, after the end, after a failure.
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  uint64_t id() const;
  const PipelineConfig& pipeline() const;
  const StreamOptions& options() const;
  const BatchLayout& layout() const;
  const SlotArena& arena() const;
  // The stream's geometry and effective options (core/engine/stream_plan.h).
  const StreamPlan& plan() const;
  uint64_t samples_per_epoch() const;  // this rank's, in a full epoch

  enum class Poll { kBatch, kNotReady, kEnd, kError };
  // Non-blocking. kBatch fills *batch (the consumer now holds batch->slot);
  // kError fills *error (the stream failed or was cancelled).
  Poll TryNext(BatchInfo* batch, absl::Status* error);

  // Blocks until a batch is ready (returned), the stream ended (nullopt), it
  // failed or was cancelled (error), or the timeout passed (DeadlineExceeded).
  absl::StatusOr<std::optional<BatchInfo>> Next(absl::Duration timeout = absl::InfiniteDuration());

  // Returns a slot the consumer holds. InvalidArgument if it does not hold it.
  absl::Status Release(uint32_t slot);

  // Stops the stream: no new work, in-flight work is dropped, batches not
  // yet taken are dropped, waiters wake with `why`, and TryNext/Next report
  // `why` from then on. A stream whose every batch was already taken stays
  // ended (kEnd). Idempotent.
  void Cancel(absl::Status why = absl::CancelledError("stream cancelled"));

  // `cb` runs whenever TryNext may return something new. Set it before
  // consuming; it replaces any earlier callback.
  void SetReadyCallback(std::function<void()> cb);

  StreamStats Stats() const;

 private:
  friend class Engine;
  Stream(std::shared_ptr<Scheduler> scheduler, std::shared_ptr<StreamMachine> state);

  std::shared_ptr<Scheduler> scheduler_;
  std::shared_ptr<StreamMachine> state_;
};

}  // namespace conveyor
