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
// Thread-safety: every method may run concurrently from any threads. Cells
// are only ever added (under a mutex), never removed, so a Cell* stays
// valid; a Cell's counters are atomics (relaxed: each is a monotonic total
// read on its own).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

  // One cell per pipeline name × concrete transport (shared memory, data
  // socket, inline).
  explicit DeliveryCounters(const std::vector<std::string>& pipelines);
  DeliveryCounters(const DeliveryCounters&) = delete;
  DeliveryCounters& operator=(const DeliveryCounters&) = delete;

  // Adds the cells of the pipelines not counted yet (a config reload).
  void AddPipelines(const std::vector<std::string>& pipelines);

  // The cell of `pipeline` over `kind`; null for a pair it has no cell for
  // (TRANSPORT_AUTO, an unknown pipeline). Valid as long as this.
  Cell* Find(const std::string& pipeline, v1::Transport kind) const;

  // Appends one DeliveryStats per cell, ordered by pipeline then transport.
  void AppendTo(v1::GetStatsResponse* out) const;

 private:
  mutable Mutex mu_;
  std::map<std::pair<std::string, int>, std::unique_ptr<Cell>> cells_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
