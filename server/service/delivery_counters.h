// DeliveryCounters: what the daemon's streams handed to their clients since
// it started — batches, images (samples) and image bytes — per pipeline and
// transport. The cells exist from construction on, one per (pipeline,
// transport) pair, so a stats reader sees every pair (zeros included) and
// the label sets of the metrics built from them (server/ops/metrics_exposition.h)
// are bounded by the config, never by streams or clients. A config reload
// adds the cells of new pipelines (AddPipelines); a removed pipeline's cells
// stay, since they are totals since the start.
//
// A stream's call adds each batch when it hands it to the stream's
// transport (server/service/stream_call.h); GetStats copies the cells out.
//
// Beside them, per pipeline, a histogram of how long its clients waited for
// their batches (WaitCell: GetStats.data_wait, conveyor_client_data_wait_seconds),
// and, daemon-wide, the StreamBatches calls refused by status code
// (StreamRefusals: GetStats.streams_refused_by_code).
//
// Thread-safety: every method may run concurrently from any threads. Cells
// are only ever added (under a mutex), never removed, so a Cell* stays
// valid; a Cell's counters are atomics (relaxed: each is a monotonic total
// read on its own).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/base/mutex.h"

namespace conveyor::server {

class DeliveryCounters {
 public:
  struct Cell {
    std::atomic<uint64_t> batches{0};
    std::atomic<uint64_t> images{0};
    std::atomic<uint64_t> bytes{0};

    void Add(uint64_t images_in_batch, uint64_t image_bytes) {
      batches.fetch_add(1, std::memory_order_relaxed);
      images.fetch_add(images_in_batch, std::memory_order_relaxed);
      bytes.fetch_add(image_bytes, std::memory_order_relaxed);
    }
  };

  // The data-wait histogram of one pipeline. Bucket bounds (seconds):
  // 0.001 0.0025 0.005 0.01 0.025 0.05 0.1 0.25 0.5 1 2.5 5 10, then +Inf:
  // from "the daemon keeps ahead" (under a millisecond: the batch was ready
  // when the credit came) to "starved" (seconds per batch).
  struct WaitCell {
    static constexpr std::array<uint64_t, 13> kUpperNs = {
        1'000'000,     2'500'000,     5'000'000,     10'000'000,  25'000'000,
        50'000'000,    100'000'000,   250'000'000,   500'000'000, 1'000'000'000,
        2'500'000'000, 5'000'000'000, 10'000'000'000};
    std::array<std::atomic<uint64_t>, kUpperNs.size() + 1> buckets{};  // the last: +Inf
    std::atomic<uint64_t> sum_ns{0};

    void Add(uint64_t wait_ns);
  };

  // One cell per pipeline name × concrete transport (shared memory, data
  // socket, inline), and one WaitCell per pipeline.
  explicit DeliveryCounters(const std::vector<std::string>& pipelines);
  DeliveryCounters(const DeliveryCounters&) = delete;
  DeliveryCounters& operator=(const DeliveryCounters&) = delete;

  // Adds the cells of the pipelines not counted yet (a config reload).
  void AddPipelines(const std::vector<std::string>& pipelines);

  // The cell of `pipeline` over `kind`; null for a pair it has no cell for
  // (TRANSPORT_AUTO, an unknown pipeline). Valid as long as this.
  Cell* Find(const std::string& pipeline, v1::Transport kind) const;
  // The data-wait histogram of `pipeline`; null for an unknown one. Valid
  // as long as this.
  WaitCell* FindWait(const std::string& pipeline) const;

  // Appends one DeliveryStats per cell, ordered by pipeline then transport,
  // and one DataWaitStats per pipeline.
  void AppendTo(v1::GetStatsResponse* out) const;

 private:
  mutable Mutex mu_;
  std::map<std::pair<std::string, int>, std::unique_ptr<Cell>> cells_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<WaitCell>> waits_ ABSL_GUARDED_BY(mu_);
};

// StreamBatches calls refused before their stream opened, by status code:
// bad requests, refused clients, limits, shutdown. Every code but OK is
// counted from zero, so each has its series from the start.
class StreamRefusals {
 public:
  // REQUIRES: `code` is not OK.
  void Add(absl::StatusCode code);
  // Sets every non-OK code's count in out->streams_refused_by_code, by the
  // code's lower-case name.
  void AppendTo(v1::GetStatsResponse* out) const;

 private:
  static constexpr int kCodes = 17;  // OK (0) through UNAUTHENTICATED (16)
  std::array<std::atomic<uint64_t>, kCodes> counts_{};
};

}  // namespace conveyor::server
