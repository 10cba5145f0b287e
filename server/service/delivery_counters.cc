#include "server/service/delivery_counters.h"

#include "absl/strings/ascii.h"
#include "server/transport/transport.h"

namespace conveyor::server {

namespace {

constexpr v1::Transport kConcrete[] = {v1::SHARED_MEMORY, v1::DATA_SOCKET, v1::INLINE};

}  // namespace

DeliveryCounters::DeliveryCounters(const std::vector<std::string>& pipelines) {
  AddPipelines(pipelines);
}

void DeliveryCounters::AddPipelines(const std::vector<std::string>& pipelines) {
  MutexLock lock(&mu_);
  for (const std::string& p : pipelines) {
    for (v1::Transport t : kConcrete) {
      auto key = std::make_pair(p, static_cast<int>(t));
      if (cells_.find(key) == cells_.end()) cells_.emplace(key, std::make_unique<Cell>());
    }
    if (waits_.find(p) == waits_.end()) waits_.emplace(p, std::make_unique<WaitCell>());
  }
}

void DeliveryCounters::WaitCell::Add(uint64_t wait_ns) {
  size_t b = 0;
  while (b < kUpperNs.size() && wait_ns > kUpperNs[b]) ++b;
  buckets[b].fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(wait_ns, std::memory_order_relaxed);
}

DeliveryCounters::WaitCell* DeliveryCounters::FindWait(const std::string& pipeline) const {
  MutexLock lock(&mu_);
  auto it = waits_.find(pipeline);
  return it == waits_.end() ? nullptr : it->second.get();
}

DeliveryCounters::Cell* DeliveryCounters::Find(const std::string& pipeline,
                                               v1::Transport kind) const {
  MutexLock lock(&mu_);
  auto it = cells_.find(std::make_pair(pipeline, static_cast<int>(kind)));
  return it == cells_.end() ? nullptr : it->second.get();
}

void DeliveryCounters::AppendTo(v1::GetStatsResponse* out) const {
  MutexLock lock(&mu_);
  for (const auto& [key, cell] : cells_) {
    v1::DeliveryStats* d = out->add_deliveries();
    d->set_pipeline(key.first);
    d->set_transport(TransportName(static_cast<v1::Transport>(key.second)));
    d->set_batches(cell->batches.load(std::memory_order_relaxed));
    d->set_images(cell->images.load(std::memory_order_relaxed));
    d->set_bytes(cell->bytes.load(std::memory_order_relaxed));
  }
  for (const auto& [pipeline, cell] : waits_) {
    v1::DataWaitStats* w = out->add_data_wait();
    w->set_pipeline(pipeline);
    for (uint64_t upper : WaitCell::kUpperNs) w->add_bucket_upper_ns(upper);
    // The count is the buckets' sum as read, so that it always equals the
    // +Inf bucket of the exposition even while batches are being added.
    uint64_t count = 0;
    for (const auto& b : cell->buckets) {
      const uint64_t n = b.load(std::memory_order_relaxed);
      w->add_bucket_counts(n);
      count += n;
    }
    w->set_count(count);
    w->set_sum_ns(cell->sum_ns.load(std::memory_order_relaxed));
  }
}

void StreamRefusals::Add(absl::StatusCode code) {
  const int c = static_cast<int>(code);
  if (c <= 0 || c >= kCodes) return;
  counts_[c].fetch_add(1, std::memory_order_relaxed);
}

void StreamRefusals::AppendTo(v1::GetStatsResponse* out) const {
  auto* by_code = out->mutable_streams_refused_by_code();
  for (int c = 1; c < kCodes; ++c) {
    (*by_code)[absl::AsciiStrToLower(absl::StatusCodeToString(static_cast<absl::StatusCode>(c)))] =
        counts_[c].load(std::memory_order_relaxed);
  }
}

}  // namespace conveyor::server
