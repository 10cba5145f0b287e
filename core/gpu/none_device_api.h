// NoneDeviceApi: the device API of a process that has no GPU to use (a
// build without CUDA): it lists no devices, and every device operation fails
// with FAILED_PRECONDITION carrying the reason it was made with.
// Thread-safety: stateless; any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/gpu/device_api.h"

namespace conveyor::gpu {

class NoneDeviceApi final : public DeviceApi {
 public:
  // `reason`: why there are no devices ("conveyord was built without CUDA").
  explicit NoneDeviceApi(std::string reason) : reason_(std::move(reason)) {}

  std::string name() const override { return "none"; }
  absl::StatusOr<std::vector<DeviceInfo>> Devices() override;
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(const DeviceInfo& device,
                                                             uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* host,
                                                                 uint64_t bytes) override;
  absl::StatusOr<std::unique_ptr<DeviceQueue>> CreateQueue(const DeviceInfo& device) override;

 private:
  absl::Status Error() const;
  const std::string reason_;
};

}  // namespace conveyor::gpu
