// HostDeviceApi: the host model of the device API (core/gpu/device_api.h),
// for tests and for conveyord's hidden --device-api=host-model flag on
// machines without a GPU. It models what the device path's logic depends on:
//
//   memory      each allocation is a memfd (mmap'ed here), its size rounded
//               up to a 2 MiB granularity; ExportFd gives a dup of the memfd
//               (mmap it to see the "device" bytes). Allocations count
//               against the device's total_bytes: beyond, RESOURCE_EXHAUSTED
//               naming the GPU.
//   addresses   opaque: allocation id << 40 | offset, never dereferenced by
//               callers; every copy and conversion is bounds-checked (an
//               error, never memory corruption).
//   pinning     RegisterHost records the range; CopyToDevice from host
//               memory outside every registered range is refused with
//               FAILED_PRECONDITION (cudaMemcpyAsync is only asynchronous
//               from page-locked memory), also when the range is
//               unregistered before the queued copy ran.
//   asynchrony  each queue has a worker thread running its copies and
//               conversions in order, later (never inside the call that
//               queued them), each after an optional delay; completions run
//               on that thread after the work queued before them. A queue's
//               destruction runs what is pending, completions included.
//
// Test aids: ReadDevice / WriteDevice, FailNextOp (the next copy or
// conversion to run fails, reported to the next completion of its queue),
// Hold (workers start nothing until released), counters of live
// allocations, registrations and device bytes in use.
//
// Unlike a CUDA context fault, a failed operation is not sticky: it is
// reported to the next completion of its queue, and later work runs.
//
// Thread-safety: every method may be called from any thread. The model's
// state outlives the HostDeviceApi while allocations or queues made by it
// are alive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/gpu/device_api.h"

namespace conveyor::gpu {

class HostDeviceApi final : public DeviceApi {
 public:
  // The allocation granularity the model rounds to.
  static constexpr uint64_t kGranularity = uint64_t{2} << 20;

  struct Options {
    // Each copy and conversion waits this long before it runs (0: none).
    absl::Duration op_delay = absl::ZeroDuration();
  };

  explicit HostDeviceApi(std::vector<DeviceInfo> devices);
  HostDeviceApi(std::vector<DeviceInfo> devices, Options options);
  ~HostDeviceApi() override;
  HostDeviceApi(const HostDeviceApi&) = delete;
  HostDeviceApi& operator=(const HostDeviceApi&) = delete;

  std::string name() const override { return "host model"; }
  absl::StatusOr<std::vector<DeviceInfo>> Devices() override;
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(const DeviceInfo& device,
                                                             uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* host,
                                                                 uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<DeviceQueue>> CreateQueue(const DeviceInfo& device) override;

  // Test aids.
  // The bytes at device address [address, address + bytes): OUT_OF_RANGE
  // outside a live allocation. Not ordered with queued work.
  absl::StatusOr<std::vector<uint8_t>> ReadDevice(uint64_t address, uint64_t bytes) const;
  absl::Status WriteDevice(uint64_t address, const void* data, uint64_t bytes);
  // The next copy or conversion to run (on any queue) fails with `status`
  // instead of running.
  void FailNextOp(absl::Status status);
  // While held, no queue starts another operation (destroying a queue
  // releases its own worker).
  void Hold(bool held);
  // Live allocations, host registrations, and the bytes allocated on a
  // device (by UUID; 0 for an unknown one).
  int allocations() const;
  int registrations() const;
  uint64_t bytes_in_use(const std::string& uuid) const;
  // Copies and conversions run so far (failed ones included).
  uint64_t ops_run() const;

  struct State;  // shared with allocations and queues (host_device_api.cc)

 private:
  std::shared_ptr<State> state_;
};

}  // namespace conveyor::gpu
