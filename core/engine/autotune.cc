#include "core/engine/autotune.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_format.h"

namespace conveyor {

namespace {

int Percent(double share) { return static_cast<int>(share * 100 + 0.5); }

// The limit each knob (StreamTuner::Knob, in order) sets.
constexpr uint32_t AutotuneLimits::*kKnobFields[] = {&AutotuneLimits::fetch_concurrency,
                                                     &AutotuneLimits::decode_concurrency,
                                                     &AutotuneLimits::fetch_queue_capacity};

uint32_t& Field(AutotuneLimits* l, int knob) { return l->*kKnobFields[knob]; }
uint32_t Value(const AutotuneLimits& l, int knob) { return l.*kKnobFields[knob]; }

uint32_t Doubled(uint32_t v, uint32_t ceiling) {
  return static_cast<uint32_t>(std::min<uint64_t>(ceiling, std::max<uint64_t>(v + 1, 2ull * v)));
}

}  // namespace

StreamTuner::StreamTuner(const Options& options, const AutotuneLimits& min,
                         const AutotuneLimits& max)
    : options_(options), min_(min), max_(max), limits_(min) {
  for (int k = 0; k < kNumKnobs; ++k) {
    assert(Value(min, k) >= 1 && Value(min, k) <= Value(max, k));
    (void)k;
  }
}

const char* StreamTuner::Name(Knob knob) {
  switch (knob) {
    case kFetch: return "fetch concurrency";
    case kDecode: return "decode concurrency";
    default: return "fetch queue capacity";
  }
}

bool StreamTuner::Raise(Knob knob, AutotuneLimits* next) const {
  *next = limits_;
  const uint32_t v = Value(limits_, knob);
  const uint32_t ceiling = Value(max_, knob);
  if (v >= ceiling) return false;
  Field(next, knob) = Doubled(v, ceiling);
  if (knob == kFetch) {
    // Reads in flight count against the queue: make room for them beside
    // what the decodes take, or the raise could not show.
    const uint64_t want = uint64_t{next->fetch_concurrency} + next->decode_concurrency;
    next->fetch_queue_capacity = static_cast<uint32_t>(
        std::clamp<uint64_t>(want, next->fetch_queue_capacity, max_.fetch_queue_capacity));
  }
  return true;
}

AutotuneDecision StreamTuner::Observe(const AutotuneObservation& o) {
  ++tick_;
  if (trial_.has_value()) return Judge(o);
  return Diagnose(o);
}

AutotuneDecision StreamTuner::Judge(const AutotuneObservation& o) {
  Trial& t = *trial_;
  if (++t.ticks <= options_.settle_ticks) return {};
  t.measured_samples += static_cast<double>(o.samples);
  t.measured_ns += static_cast<double>(o.tick_ns);
  if (t.ticks < options_.settle_ticks + options_.measure_ticks) return {};

  const double rate = t.measured_ns > 0 ? t.measured_samples * 1e9 / t.measured_ns : 0;
  const bool paid = rate >= t.baseline_rate * (1 + options_.min_gain);
  const Knob knob = t.knob;
  AutotuneDecision d;
  if (paid) {
    failures_[knob] = 0;
    last_rate_ = rate;
    reason_ = absl::StrFormat("kept %s %d (was %d): %.0f -> %.0f samples/s", Name(knob),
                              Value(limits_, knob), Value(t.before, knob), t.baseline_rate, rate);
  } else {
    const uint32_t shift = std::min<uint32_t>(failures_[knob], 16);
    ++failures_[knob];
    const uint64_t hold =
        std::min<uint64_t>(options_.max_hold_ticks, uint64_t{options_.hold_ticks} << shift);
    hold_until_[knob] = tick_ + hold;
    reason_ = absl::StrFormat(
        "undid %s %d -> %d: %.0f -> %.0f samples/s, less than +%d%%; left alone for %d ticks",
        Name(knob), Value(t.before, knob), Value(limits_, knob), t.baseline_rate, rate,
        Percent(options_.min_gain), hold);
    limits_ = t.before;
    ++changes_;
    last_rate_ = -1;  // the next baseline is measured afresh
    d.changed = true;
  }
  d.reason = reason_;
  trial_.reset();
  return d;
}

AutotuneDecision StreamTuner::Diagnose(const AutotuneObservation& o) {
  const double rate = o.tick_ns > 0 ? static_cast<double>(o.samples) * 1e9 / o.tick_ns : 0;
  const double before = last_rate_;
  last_rate_ = rate;
  AutotuneDecision d;
  auto hold = [&](std::string why) {
    reason_ = std::move(why);
    d.reason = reason_;
    return d;
  };
  if (o.client_starved < options_.starved_share) {
    return hold(absl::StrFormat("the client sets the pace (it waited %d%% of the time)",
                                Percent(o.client_starved)));
  }
  const double bound = options_.bound_share;
  Knob knob;
  std::string why;
  // Where the decodes' time went names the bound: waiting for a worker
  // (the CPU), at their own limit, or starved of reads (then which of the
  // read limits held them back).
  const bool decode_bound = o.decode_at_limit >= bound && o.decode_at_limit >= o.decode_starved;
  if (o.decode_no_worker >= bound) {
    return hold(
        absl::StrFormat("CPU-bound: fetched samples waited for a free worker %d%% of the time",
                        Percent(o.decode_no_worker)));
  } else if (decode_bound) {
    knob = kDecode;
    why = absl::StrFormat("fetched samples waited at the decode limit %d%% of the time",
                          Percent(o.decode_at_limit));
  } else if (o.decode_starved >= options_.starved_share && o.fetch_bytes_full >= bound) {
    return hold(absl::StrFormat(
        "decode waited for reads %d%% of the time, held back by fetch_queue_bytes (%d%%): "
        "memory is the bound",
        Percent(o.decode_starved), Percent(o.fetch_bytes_full)));
  } else if (o.decode_starved >= options_.starved_share && o.fetch_at_limit >= bound) {
    knob = kFetch;
    why = absl::StrFormat("decode waited for reads %d%% of the time, reads at their limit %d%%",
                          Percent(o.decode_starved), Percent(o.fetch_at_limit));
  } else if (o.decode_starved >= options_.starved_share && o.fetch_queue_full >= bound) {
    knob = kQueue;
    why = absl::StrFormat("decode waited for reads %d%% of the time, the fetch queue full %d%%",
                          Percent(o.decode_starved), Percent(o.fetch_queue_full));
  } else if (o.decode_at_limit >= bound) {
    knob = kDecode;
    why = absl::StrFormat("fetched samples waited at the decode limit %d%% of the time",
                          Percent(o.decode_at_limit));
  } else {
    return hold(absl::StrFormat(
        "the client waited %d%% of the time; no limit of the stream was the bound (decode "
        "waited for reads %d%%)",
        Percent(o.client_starved), Percent(o.decode_starved)));
  }
  AutotuneLimits next;
  if (!Raise(knob, &next)) {
    return hold(absl::StrFormat("%s; %s at its ceiling %d", why, Name(knob), Value(max_, knob)));
  }
  if (Held(knob)) {
    return hold(absl::StrFormat("%s; %s left alone for %d more ticks", why, Name(knob),
                                hold_until_[knob] - tick_));
  }
  if (before < 0) return hold(why + "; measuring before a change");
  trial_ = Trial{knob, limits_, (before + rate) / 2};
  limits_ = next;
  ++changes_;
  reason_ = absl::StrFormat("raised %s %d -> %d: %s", Name(knob), Value(trial_->before, knob),
                            Value(limits_, knob), why);
  d.changed = true;
  d.reason = reason_;
  return d;
}

void AutotuneClock::Start(uint64_t now_ns) {
  since_ns_ = tick_start_ns_ = now_ns;
  held_ns_.fill(0);
}

void AutotuneClock::Set(uint32_t bits, uint64_t now_ns) {
  if (now_ns > since_ns_) {
    for (int i = 0; i < kNumSignals; ++i) {
      if (bits_ & (1u << i)) held_ns_[i] += now_ns - since_ns_;
    }
    since_ns_ = now_ns;
  }
  bits_ = bits;
}

AutotuneObservation AutotuneClock::Take(uint64_t now_ns, uint64_t samples) {
  Set(bits_, now_ns);
  AutotuneObservation o;
  o.tick_ns = since_ns_ > tick_start_ns_ ? since_ns_ - tick_start_ns_ : 0;
  o.samples = samples;
  auto share = [&](Signal s) {
    return o.tick_ns == 0
               ? 0.0
               : std::min(1.0, static_cast<double>(held_ns_[s]) / static_cast<double>(o.tick_ns));
  };
  o.client_starved = share(kClientStarved);
  o.fetch_at_limit = share(kFetchAtLimit);
  o.fetch_queue_full = share(kFetchQueueFull);
  o.fetch_bytes_full = share(kFetchBytesFull);
  o.decode_starved = share(kDecodeStarved);
  o.decode_at_limit = share(kDecodeAtLimit);
  o.decode_no_worker = share(kDecodeNoWorker);
  held_ns_.fill(0);
  tick_start_ns_ = since_ns_;
  return o;
}

}  // namespace conveyor
