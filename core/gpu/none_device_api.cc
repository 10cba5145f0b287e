#include "core/gpu/none_device_api.h"

#include "absl/strings/str_cat.h"

namespace conveyor::gpu {

absl::Status NoneDeviceApi::Error() const {
  return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", reason_));
}

absl::StatusOr<std::vector<DeviceInfo>> NoneDeviceApi::Devices() { return Error(); }

absl::StatusOr<std::unique_ptr<DeviceAllocation>> NoneDeviceApi::Allocate(const DeviceInfo&,
                                                                          uint64_t) {
  return Error();
}

absl::StatusOr<std::unique_ptr<HostRegistration>> NoneDeviceApi::RegisterHost(void*, uint64_t) {
  return Error();
}

absl::StatusOr<std::unique_ptr<DeviceQueue>> NoneDeviceApi::CreateQueue(const DeviceInfo&) {
  return Error();
}

}  // namespace conveyor::gpu
