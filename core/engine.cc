#include "core/engine.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/sampler.h"
#include "core/scheduler.h"

namespace conveyor {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  EngineOptions o = options;
  if (o.num_threads < 0 || o.num_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_threads %d must be within [0, 1024] (0: one per core)", o.num_threads));
  }
  if (o.num_threads == 0) o.num_threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.fetch_queue_capacity == 0) o.fetch_queue_capacity = std::max(4, 2 * o.num_threads);
  if (o.fetch_concurrency == 0) o.fetch_concurrency = 1;
  if (o.decode_concurrency == 0) o.decode_concurrency = static_cast<uint32_t>(o.num_threads);
  auto scheduler = std::make_shared<Scheduler>(o);
  scheduler->Start();
  return std::unique_ptr<Engine>(new Engine(std::move(scheduler)));
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() { scheduler_->Shutdown(); }

int Engine::num_threads() const { return scheduler_->options().num_threads; }

EngineStats Engine::Stats() const { return scheduler_->Stats(); }

absl::StatusOr<std::unique_ptr<Stream>> Engine::OpenStream(
    std::shared_ptr<const PipelineConfig> pipeline, const StreamOptions& options) {
  if (pipeline == nullptr) return absl::InvalidArgumentError("no pipeline given");
  if (absl::Status s = ValidateStreamOptions(*pipeline, options); !s.ok()) return s;

  auto state = std::make_shared<StreamState>();
  state->id = scheduler_->NextStreamId();
  state->pipeline = pipeline;
  state->options = options;
  state->layout = BatchLayout::For(pipeline->transform, options.batch_size);
  auto arena = SlotArena::Create(options.num_slots, state->layout.slot_bytes,
                                 options.shareable_memory,
                                 absl::StrFormat("conveyor-stream-%d", state->id));
  if (!arena.ok()) return arena.status();
  state->arena = std::move(*arena);

  state->first_epoch_samples =
      SamplesPerRank(SamplerOptionsFor(*pipeline, options, options.first_epoch));
  state->samples_per_epoch =
      SamplesPerRank(SamplerOptionsFor(*pipeline, options, options.first_epoch + 1));
  if (options.num_epochs > 0) {
    state->total_batches = scheduler_->BatchesInEpoch(*state, options.first_epoch) +
                           (options.num_epochs - 1) * scheduler_->BatchesInEpoch(
                                                           *state, options.first_epoch + 1);
  }
  const EngineOptions& eo = scheduler_->options();
  state->fetch_capacity = eo.fetch_queue_capacity;
  state->fetch_limit = eo.fetch_concurrency;
  state->decode_limit = eo.decode_concurrency;
  // Fetch buffers: one per queued sample, plus one per decode in flight.
  const uint32_t num_buffers = state->fetch_capacity + state->decode_limit;
  state->buffers.resize(num_buffers);
  for (uint32_t i = 0; i < num_buffers; ++i) state->free_buffers.push_back(i);
  // Slots are handed out lowest first.
  for (uint32_t i = options.num_slots; i > 0; --i) state->free_slots.push_back(i - 1);
  state->consumer_holds.assign(options.num_slots, 0);
  state->created_ns = MonotonicNanos();
  scheduler_->Register(state);
  return std::unique_ptr<Stream>(new Stream(scheduler_, std::move(state)));
}

}  // namespace conveyor
