#include "core/engine/stats.h"

#include <time.h>

namespace conveyor {

const char* ToString(Stage s) {
  switch (s) {
    case Stage::kSample: return "sample";
    case Stage::kFetch: return "fetch";
    case Stage::kDecode: return "decode";
    case Stage::kCollate: return "collate";
    case Stage::kDeliver: return "deliver";
  }
  return "?";
}

void CountFailure(StageStats* s, const absl::Status& why) {
  ++s->failures;
  const auto code = static_cast<size_t>(why.code());
  if (code < s->failures_by_code.size()) {
    ++s->failures_by_code[code];
  } else {
    ++s->failures_by_code[static_cast<size_t>(absl::StatusCode::kUnknown)];
  }
}

uint64_t MonotonicNanos() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void StageClock::Set(State s, uint64_t now_ns) {
  if (s == state_ && since_ns_ != 0) return;
  if (since_ns_ != 0 && now_ns > since_ns_) {
    if (state_ == kStarved) starved_ns_ += now_ns - since_ns_;
    if (state_ == kBlocked) blocked_ns_ += now_ns - since_ns_;
  }
  state_ = s;
  since_ns_ = now_ns;
}

void StageClock::AddTo(StageStats* stats, uint64_t now_ns) const {
  uint64_t starved = starved_ns_, blocked = blocked_ns_;
  if (since_ns_ != 0 && now_ns > since_ns_) {
    if (state_ == kStarved) starved += now_ns - since_ns_;
    if (state_ == kBlocked) blocked += now_ns - since_ns_;
  }
  stats->wait_input_ns += starved;
  stats->wait_output_ns += blocked;
}

Stage Bottleneck(const std::array<StageStats, kNumStages>& stages) {
  // Producers blocked on output space most of the time: the consumer is slow.
  const StageStats& collate = stages[static_cast<int>(Stage::kCollate)];
  const StageStats& decode = stages[static_cast<int>(Stage::kDecode)];
  if (collate.wait_output_ns > decode.busy_ns && collate.wait_output_ns > 0) return Stage::kDeliver;
  int best = static_cast<int>(Stage::kDecode);
  for (int i = 0; i < static_cast<int>(Stage::kDeliver); ++i) {
    if (stages[i].busy_ns > stages[best].busy_ns) best = i;
  }
  return static_cast<Stage>(best);
}

std::optional<Stage> BottleneckUnderLoad(const std::vector<StreamStats>& open_streams) {
  std::array<StageStats, kNumStages> sum;
  for (const StreamStats& s : open_streams) AddStages(&sum, s.stages);
  bool load = false;
  for (const StageStats& s : sum) load = load || s.busy_ns > 0 || s.wait_output_ns > 0;
  if (!load) return std::nullopt;
  return Bottleneck(sum);
}

void AddStages(std::array<StageStats, kNumStages>* into,
               const std::array<StageStats, kNumStages>& from) {
  for (int i = 0; i < kNumStages; ++i) {
    StageStats& a = (*into)[i];
    const StageStats& b = from[i];
    a.items_in += b.items_in;
    a.items_out += b.items_out;
    a.failures += b.failures;
    for (size_t c = 0; c < a.failures_by_code.size(); ++c) {
      a.failures_by_code[c] += b.failures_by_code[c];
    }
    a.busy_ns += b.busy_ns;
    a.wait_input_ns += b.wait_input_ns;
    a.wait_output_ns += b.wait_output_ns;
    a.queue_size += b.queue_size;
    a.queue_capacity += b.queue_capacity;
    a.in_flight += b.in_flight;
  }
}

}  // namespace conveyor
