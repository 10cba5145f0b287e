#include "core/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/engine/scheduler.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

namespace {

absl::Status ValidateRetry(const EngineOptions& o) {
  if (o.fetch_retry_max_attempts == 0) {
    return absl::InvalidArgumentError("fetch_retry_max_attempts must be at least 1 (1: no retry)");
  }
  if (o.fetch_retry_initial_backoff < absl::ZeroDuration() ||
      o.fetch_retry_max_backoff < o.fetch_retry_initial_backoff) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fetch retry backoff must satisfy 0 <= fetch_retry_initial_backoff (%s) "
                        "<= fetch_retry_max_backoff (%s)",
                        absl::FormatDuration(o.fetch_retry_initial_backoff),
                        absl::FormatDuration(o.fetch_retry_max_backoff)));
  }
  if (o.fetch_retry_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("fetch_retry_deadline must be positive");
  }
  return absl::OkStatus();
}

uint64_t Nanos(absl::Duration d) {
  return d == absl::InfiniteDuration() ? ~uint64_t{0}
                                       : static_cast<uint64_t>(absl::ToInt64Nanoseconds(d));
}

}  // namespace

AutotuneLimits AutotuneMaxLimits(const EngineOptions& o) {
  const uint32_t threads = static_cast<uint32_t>(std::max(1, o.num_threads));
  AutotuneLimits m;
  m.fetch_concurrency = std::max(o.fetch_concurrency, o.autotune_max_fetch_concurrency);
  m.decode_concurrency = std::max(o.decode_concurrency, threads);
  m.fetch_queue_capacity =
      std::max(o.fetch_queue_capacity, o.autotune_max_fetch_concurrency + 2 * threads);
  return m;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  EngineOptions o = options;
  if (o.num_threads < 0 || o.num_threads > kMaxEngineThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_threads %d must be within [0, %d] (0: one per core)", o.num_threads,
                        kMaxEngineThreads));
  }
  RETURN_IF_ERROR(ValidateRetry(o));
  if (!(o.cpu_budget >= 0) || !std::isfinite(o.cpu_budget)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cpu_budget must be 0 (no limit) or a positive number of CPUs, got %g", o.cpu_budget));
  }
  if (o.num_threads == 0) o.num_threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.cpu_budget > 0) {
    // More workers than the budget's CPUs could only take turns being held
    // back; the throttle makes a fractional budget exact.
    o.num_threads = std::min(o.num_threads, std::max(1, static_cast<int>(std::ceil(o.cpu_budget))));
  }
  if (o.fetch_queue_capacity == 0) o.fetch_queue_capacity = std::max(4, 2 * o.num_threads);
  if (o.fetch_concurrency == 0) o.fetch_concurrency = 1;
  if (o.fetch_queue_bytes == 0) {
    return absl::InvalidArgumentError("fetch_queue_bytes must be at least 1");
  }
  if (o.decode_concurrency == 0) o.decode_concurrency = static_cast<uint32_t>(o.num_threads);
  if (o.autotune && o.autotune_max_fetch_concurrency == 0) {
    return absl::InvalidArgumentError("autotune_max_fetch_concurrency must be at least 1");
  }
  if (o.autotune && o.autotune_tick <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("autotune_tick must be positive");
  }
  auto scheduler = std::make_shared<Scheduler>(o);
  scheduler->Start();
  return std::unique_ptr<Engine>(new Engine(std::move(scheduler)));
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() { scheduler_->Shutdown(); }

int Engine::num_threads() const { return scheduler_->options().num_threads; }

EngineStats Engine::Stats() const { return scheduler_->Stats(); }

SchedulerStats Engine::scheduler_stats() const { return scheduler_->scheduler_stats(); }

absl::StatusOr<std::unique_ptr<Stream>> Engine::OpenStream(
    std::shared_ptr<const PipelineConfig> pipeline, const StreamOptions& options) {
  if (pipeline == nullptr) return absl::InvalidArgumentError("no pipeline given");
  ASSIGN_OR_RETURN(StreamPlan plan, PlanStream(*pipeline, options));
  return OpenStream(std::move(pipeline), std::move(plan));
}

absl::StatusOr<std::unique_ptr<Stream>> Engine::OpenStream(
    std::shared_ptr<const PipelineConfig> pipeline, StreamPlan plan) {
  if (pipeline == nullptr) return absl::InvalidArgumentError("no pipeline given");
  StreamMachine::Config c;
  c.id = scheduler_->NextStreamId();
  c.pipeline = pipeline;
  c.plan = std::move(plan);
  const EngineOptions& eo = scheduler_->options();
  c.fetch_capacity = eo.fetch_queue_capacity;
  c.fetch_limit = eo.fetch_concurrency;
  c.fetch_bytes = eo.fetch_queue_bytes;
  c.decode_limit = eo.decode_concurrency;
  c.autotune = eo.autotune;
  if (eo.autotune) {
    c.autotune_max = AutotuneMaxLimits(eo);
    c.autotune_options.tick_ns = Nanos(eo.autotune_tick);
  }
  c.retry.max_attempts = eo.fetch_retry_max_attempts;
  c.retry.initial_backoff_ns = Nanos(eo.fetch_retry_initial_backoff);
  c.retry.max_backoff_ns = Nanos(eo.fetch_retry_max_backoff);
  c.retry.deadline_ns = Nanos(eo.fetch_retry_deadline);
  c.file_reader = eo.file_reader;
  // A done of a finisher runs while the stream's handle lives (its
  // destructor drains the finisher), and the handle holds the scheduler.
  c.finish_done = [scheduler = scheduler_.get()](StreamMachine* s, uint64_t sequence,
                                                 absl::Status status) {
    scheduler->FinishDone(s, sequence, std::move(status));
  };
  // Parked fetches come back before the scheduler's workers exit (its
  // Shutdown waits for them), so the scheduler outlives every call.
  c.fetch_done = [scheduler = scheduler_.get()](Task t) { scheduler->FetchDone(std::move(t)); };
  ASSIGN_OR_RETURN(
      std::unique_ptr<SlotArena> arena,
      SlotArena::Create(c.plan.options.num_slots, c.plan.layout.slot_bytes, c.plan.options.memory,
                        absl::StrFormat("conveyor-stream-%d", c.id)));
  if (const std::shared_ptr<BatchFinisher>& f = c.plan.options.finisher; f != nullptr) {
    RETURN_IF_ERROR(f->Attach(*arena, c.plan.layout));
  }
  auto state = std::make_shared<StreamMachine>(std::move(c), std::move(arena), scheduler_->mu());
  scheduler_->Register(state);
  return std::unique_ptr<Stream>(new Stream(scheduler_, std::move(state)));
}

}  // namespace conveyor
