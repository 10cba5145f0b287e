#include "server/service/delivery_counters.h"

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
  }
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
}

}  // namespace conveyor::server
