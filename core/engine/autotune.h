// Autotune: the per-stream tuner of the fetch and decode stages
// (EngineOptions::autotune). It chooses, from what the stream measures, how
// many reads a stream keeps in flight (fetch concurrency), how many decodes
// (decode concurrency) and how many samples it reads ahead of its decodes
// (the fetch queue's capacity), within bounds fixed when the stream opens,
// so it can never take more memory than the worst case the config counts.
//
// The rule, one step per observation (a tick of StreamTuner::Options::
// tick_ns of the stream's work):
//   - Nothing changes while the stream's client is seldom starved (it asked
//     for a batch, with a free credit, and none was ready, for less than
//     starved_share of the tick): the client, not the pipeline, sets the pace.
//   - Otherwise the stage that holds the stream back is named from where its
//     time went, and the one setting that frees it is raised:
//       decode work waits for a worker      → CPU-bound: nothing to raise;
//       decode has input, at its limit      → decode concurrency × 2;
//       (more than it starves)
//       decode starved, fetch_queue_bytes   → nothing: memory is the bound;
//       decode starved, fetch at its limit  → fetch concurrency × 2 (and the
//                                             queue, so the reads fit in it);
//       decode starved, fetch queue full    → fetch queue capacity × 2.
//   - A raise is kept only if it paid: after settle_ticks, the rate of
//     samples over measure_ticks must beat the rate before it by min_gain.
//     Otherwise it is undone and that
//     setting is left alone for a backoff that doubles with each raise that
//     did not pay (hold_ticks × 2^k, at most max_hold_ticks). Settings only
//     go up from where the stream started, and a change undone is not tried
//     again until its backoff ends: no oscillation.
//
// StreamTuner is a pure function of its observations (no clock, no
// threads), so unit tests drive it with a simulated pipeline.
//
// Thread-safety: StreamTuner is not synchronised; its owner (the stream,
// under the engine's lock) serialises calls. AutotuneClock likewise.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace conveyor {

// The settings a tuner chooses.
struct AutotuneLimits {
  uint32_t fetch_concurrency = 1;
  uint32_t decode_concurrency = 1;
  uint32_t fetch_queue_capacity = 1;
  bool operator==(const AutotuneLimits&) const = default;
};

// What a stream's time went to, as shares of one tick (each in [0, 1];
// several may hold at once), and the samples it finished.
struct AutotuneObservation {
  uint64_t tick_ns = 0;
  uint64_t samples = 0;         // positions finished (written or failed) in the tick
  double client_starved = 0;    // the client had a free credit and no batch was ready
  double fetch_at_limit = 0;    // reads wanted to start; fetch concurrency was the bound
  double fetch_queue_full = 0;  // ... the fetch queue's capacity was the bound
  double fetch_bytes_full = 0;  // ... fetch_queue_bytes was the bound
  double decode_starved = 0;    // no fetched sample waited for a decode
  double decode_at_limit = 0;   // fetched samples waited; decode concurrency was the bound
  double decode_no_worker = 0;  // fetched samples waited below that bound: no worker was free
};

// Why the tuner did what it did in a tick.
struct AutotuneDecision {
  bool changed = false;  // limits() differ from before the tick
  std::string reason;    // one line for logs and `conveyor stats`
};

class StreamTuner {
 public:
  struct Options {
    uint64_t tick_ns = 250'000'000;
    double starved_share = 0.05;   // client starved less than this: hold
    double bound_share = 0.3;      // a stage "was the bound" for at least this share
    double min_gain = 0.05;        // a raise must bring this much more rate
    uint32_t settle_ticks = 1;     // ticks skipped after a change (queues fill)
    uint32_t measure_ticks = 2;    // ticks averaged to judge it
    uint32_t hold_ticks = 8;       // backoff after a raise that did not pay ...
    uint32_t max_hold_ticks = 64;  // ... doubling up to this
  };

  // REQUIRES: min <= start <= max, field by field, all ≥ 1.
  StreamTuner(const Options& options, const AutotuneLimits& min, const AutotuneLimits& max);

  const AutotuneLimits& limits() const { return limits_; }
  const AutotuneLimits& max() const { return max_; }
  // Settings changed (raises kept or undone count one each).
  uint64_t changes() const { return changes_; }
  // The reason of the last tick that decided something (or "starting").
  const std::string& reason() const { return reason_; }

  AutotuneDecision Observe(const AutotuneObservation& o);

 private:
  enum Knob { kFetch = 0, kDecode, kQueue, kNumKnobs };
  struct Trial {
    Knob knob;
    AutotuneLimits before;
    double baseline_rate = 0;
    uint32_t ticks = 0;  // since the change
    double measured_samples = 0;
    double measured_ns = 0;
  };

  AutotuneDecision Judge(const AutotuneObservation& o);
  AutotuneDecision Diagnose(const AutotuneObservation& o);
  // Raises `knob` from the current limits; false when at its ceiling.
  bool Raise(Knob knob, AutotuneLimits* next) const;
  bool Held(Knob knob) const { return tick_ < hold_until_[knob]; }
  static const char* Name(Knob knob);

  const Options options_;
  const AutotuneLimits min_, max_;
  AutotuneLimits limits_;
  uint64_t tick_ = 0;
  uint64_t changes_ = 0;
  std::string reason_ = "starting";
  std::optional<Trial> trial_;
  double last_rate_ = -1;  // samples/s of the tick before (-1: none yet)
  std::array<uint64_t, kNumKnobs> hold_until_{};
  std::array<uint32_t, kNumKnobs> failures_{};
};

// Accumulates, per signal, the time it held: Set(bits, now) closes the time
// since the last call to the signals that held then.
class AutotuneClock {
 public:
  enum Signal {
    kClientStarved = 0,
    kFetchAtLimit,
    kFetchQueueFull,
    kFetchBytesFull,
    kDecodeStarved,
    kDecodeAtLimit,
    kDecodeNoWorker,
    kNumSignals
  };
  void Set(uint32_t bits, uint64_t now_ns);
  // The shares of [since_ns, now_ns] since the last Take, with `samples`,
  // and starts the next tick.
  AutotuneObservation Take(uint64_t now_ns, uint64_t samples);
  uint64_t tick_start_ns() const { return tick_start_ns_; }
  void Start(uint64_t now_ns);

 private:
  uint32_t bits_ = 0;
  uint64_t since_ns_ = 0;
  uint64_t tick_start_ns_ = 0;
  std::array<uint64_t, kNumSignals> held_ns_{};
};

}  // namespace conveyor
