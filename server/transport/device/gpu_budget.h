// GpuBudget: the device memory DEVICE_MEMORY streams may hold on each GPU
// together (the config's gpu_memory_budget, the same figure for every GPU;
// 0 = a quarter of each GPU's total memory). A stream reserves its ring and
// staging buffers before anything is allocated on the device, and the
// reservation is given back when the stream's finisher lets its device
// memory go. A stream that does not fit is refused with RESOURCE_EXHAUSTED
// naming the GPU (UUID and name), the budget and what is in use.
//
// Thread-safety: all methods may be called from any thread. A Reservation
// is owned by one owner and keeps the budget alive.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/gpu/device_api.h"

namespace conveyor::server {

class GpuBudget : public std::enable_shared_from_this<GpuBudget> {
 public:
  // `bytes_per_gpu`: what each GPU's streams may hold together; 0: a
  // quarter of the GPU's total memory.
  static std::shared_ptr<GpuBudget> Create(uint64_t bytes_per_gpu);

  // Device bytes held until destroyed.
  class Reservation {
   public:
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    uint64_t bytes() const { return bytes_; }

   private:
    friend class GpuBudget;
    Reservation(std::shared_ptr<GpuBudget> budget, std::string uuid, uint64_t bytes)
        : budget_(std::move(budget)), uuid_(std::move(uuid)), bytes_(bytes) {}
    const std::shared_ptr<GpuBudget> budget_;
    const std::string uuid_;
    const uint64_t bytes_;
  };

  // The budget of `device`.
  uint64_t LimitOf(const gpu::DeviceInfo& device) const;
  // `bytes` more on `device`, or RESOURCE_EXHAUSTED saying why not.
  absl::StatusOr<std::unique_ptr<Reservation>> Reserve(const gpu::DeviceInfo& device,
                                                       uint64_t bytes);
  // Device bytes reserved on the GPU of `uuid`, and by how many streams.
  uint64_t InUse(const std::string& uuid) const;
  int Holders(const std::string& uuid) const;

 private:
  explicit GpuBudget(uint64_t bytes_per_gpu) : bytes_per_gpu_(bytes_per_gpu) {}
  void Give(const std::string& uuid, uint64_t bytes);

  struct Use {
    uint64_t bytes = 0;
    int holders = 0;
  };
  const uint64_t bytes_per_gpu_;
  mutable Mutex mu_;
  std::map<std::string, Use> in_use_ ABSL_GUARDED_BY(mu_);
};

// "1.5 GiB", "12.0 MiB", "512 B": for messages.
std::string FormatDeviceBytes(uint64_t bytes);

}  // namespace conveyor::server
