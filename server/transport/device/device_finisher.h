// DeviceFinisher: the last step of a DEVICE_MEMORY stream's batches
// (core/engine/batch_finisher.h): each finished host slot is copied to the
// stream's ring of device buffers on the GPU the client named, and converted
// there when the pipeline's dtype is a float type, before the batch may be
// delivered.
//
//   host slots   the stream's memfd (SlotMemory::kDevice), page-locked once
//                through DeviceApi::RegisterHost at Attach. Under
//                collate_uint8 they hold the uint8 samples of a float
//                pipeline: a quarter of the bytes cross PCIe.
//   ring         num_slots device buffers in ONE DeviceAllocation (what the
//                client maps: ExportRingFd); ring slot i mirrors host slot i,
//                so it is written again only once the client released slot i
//                and the engine refilled it.
//   staging      one device buffer for the uint8 bytes of a batch being
//                converted (only when converting); one ordered DeviceQueue
//                makes each batch's copy → convert finish before the next
//                batch's copy overwrites it.
//
// Finish queues copy (→ convert) → completion; the completion calls the
// engine's `done`, so a batch is handed to the client only once its bytes
// are on the device. The device bytes count against the GPU's budget
// (GpuBudget) from Attach until Drain (or destruction) lets them go.
//
// Thread-safety: as BatchFinisher. The accessors are constant after a
// successful Attach; ExportRingFd may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/base/unique_fd.h"
#include "core/decode/transform_spec.h"
#include "core/engine/batch_finisher.h"
#include "core/engine/slot_arena.h"
#include "core/engine/stream.h"
#include "core/gpu/device_api.h"
#include "server/transport/device/gpu_budget.h"

namespace conveyor::server {

class DeviceFinisher final : public BatchFinisher {
 public:
  // Ring slots start at multiples of this (device buffers for the client's
  // kernels).
  static constexpr uint64_t kRingAlignment = 256;
  // What the budget reserves per allocation before it exists: CUDA's VMM
  // granularity (and the host model's) is 2 MiB.
  static constexpr uint64_t kReserveGranularity = uint64_t{2} << 20;

  // `transform`: the pipeline's (its dtype is what lands on the device).
  DeviceFinisher(std::shared_ptr<gpu::DeviceApi> api, gpu::DeviceInfo device,
                 std::shared_ptr<GpuBudget> budget, TransformSpec transform);
  ~DeviceFinisher() override;  // as Drain
  DeviceFinisher(const DeviceFinisher&) = delete;
  DeviceFinisher& operator=(const DeviceFinisher&) = delete;

  absl::Status Attach(SlotArena& arena, const BatchLayout& layout) override;
  void Finish(const BatchInfo& batch, absl::AnyInvocable<void(absl::Status) &&> done) override;
  void Drain() override;

  const gpu::DeviceInfo& device() const { return device_; }
  // The pipeline's dtype: what the device bytes are.
  DType device_dtype() const { return transform_.dtype; }
  bool converts() const { return converts_; }
  uint64_t device_sample_bytes() const { return device_sample_bytes_; }
  uint64_t ring_slot_bytes() const { return ring_slot_bytes_; }
  uint32_t num_slots() const { return num_slots_; }
  // The ring allocation's size (what the client maps) and device address.
  uint64_t ring_bytes() const { return ring_bytes_; }
  uint64_t ring_address() const { return ring_address_; }
  // Device bytes reserved against the GPU's budget (ring and staging).
  uint64_t reserved_bytes() const { return reserved_bytes_; }

  // A new fd of the ring allocation, owned by the caller;
  // FAILED_PRECONDITION once the stream's device memory is gone.
  absl::StatusOr<UniqueFd> ExportRingFd() const;

 private:
  class InFlight;
  // Frees the device memory and the host registration after the queue has
  // run everything.
  void ReleaseDevice();

  const std::shared_ptr<gpu::DeviceApi> api_;
  const gpu::DeviceInfo device_;
  const std::shared_ptr<GpuBudget> budget_;
  const TransformSpec transform_;
  const std::shared_ptr<InFlight> in_flight_;

  // Set by Attach.
  uint8_t* host_base_ = nullptr;
  uint64_t host_slot_bytes_ = 0;
  uint64_t host_images_offset_ = 0;
  uint64_t host_sample_bytes_ = 0;
  uint64_t device_sample_bytes_ = 0;
  uint64_t ring_slot_bytes_ = 0;
  uint64_t ring_bytes_ = 0;
  uint64_t ring_address_ = 0;
  uint64_t staging_address_ = 0;
  uint64_t reserved_bytes_ = 0;
  uint32_t num_slots_ = 0;
  bool converts_ = false;
  gpu::ConvertSpec convert_;

  mutable Mutex mu_;
  bool drained_ ABSL_GUARDED_BY(mu_) = false;
  // Destroyed in reverse order: the queue (it runs what is queued) before
  // the buffers it writes, the registration of the host slots it reads and
  // the budget.
  std::unique_ptr<GpuBudget::Reservation> reservation_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<gpu::HostRegistration> registration_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<gpu::DeviceAllocation> ring_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<gpu::DeviceAllocation> staging_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<gpu::DeviceQueue> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
