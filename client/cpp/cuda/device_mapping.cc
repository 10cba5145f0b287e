#include "client/cpp/cuda/device_mapping.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace conveyor::client {

DeviceMapping::~DeviceMapping() { Reset(); }

DeviceMapping::DeviceMapping(DeviceMapping&& other) noexcept
    : context_(std::move(other.context_)),
      handle_(std::exchange(other.handle_, 0)),
      have_handle_(std::exchange(other.have_handle_, false)),
      base_(std::exchange(other.base_, 0)),
      mapped_(std::exchange(other.mapped_, false)),
      size_(std::exchange(other.size_, 0)) {}

DeviceMapping& DeviceMapping::operator=(DeviceMapping&& other) noexcept {
  if (this != &other) {
    Reset();
    context_ = std::move(other.context_);
    handle_ = std::exchange(other.handle_, 0);
    have_handle_ = std::exchange(other.have_handle_, false);
    base_ = std::exchange(other.base_, 0);
    mapped_ = std::exchange(other.mapped_, false);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceMapping::Reset() {
  if (context_.get() != nullptr) {
    const CudaDriver::Api& api = context_.driver()->api();
    absl::StatusOr<std::unique_ptr<ContextScope>> scope = ContextScope::Enter(context_);
    if (mapped_) api.cuMemUnmap(base_, size_);
    if (base_ != 0) api.cuMemAddressFree(base_, size_);
    if (have_handle_) api.cuMemRelease(handle_);
  }
  mapped_ = false;
  base_ = 0;
  have_handle_ = false;
  handle_ = 0;
  size_ = 0;
  context_ = PrimaryContext();
}

absl::StatusOr<DeviceMapping> DeviceMapping::Import(std::shared_ptr<const CudaDriver> driver,
                                                    const std::string& gpu_uuid, int fd,
                                                    uint64_t size) {
  if (size == 0)
    return absl::FailedPreconditionError("the daemon announced an empty device region");
  ASSIGN_OR_RETURN(const CUdevice device, driver->FindDevice(gpu_uuid));
  const CudaDriver::Api& api = driver->api();
  DeviceMapping out;
  ASSIGN_OR_RETURN(out.context_, PrimaryContext::Retain(driver, device));
  ASSIGN_OR_RETURN(std::unique_ptr<ContextScope> scope, ContextScope::Enter(out.context_));
  // From here each step is undone by Reset() (out's destructor) if a later
  // one fails.
  RETURN_IF_ERROR(driver->Check(
      api.cuMemImportFromShareableHandle(
          &out.handle_, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kMemHandleTypePosixFd),
      "cuMemImportFromShareableHandle of the stream's device region fd"));
  out.have_handle_ = true;
  out.size_ = size;
  RETURN_IF_ERROR(driver->Check(api.cuMemAddressReserve(&out.base_, size, 0, 0, 0),
                                absl::StrCat("cuMemAddressReserve of ", size, " bytes")));
  RETURN_IF_ERROR(driver->Check(api.cuMemMap(out.base_, size, 0, out.handle_, 0),
                                absl::StrCat("cuMemMap of the ", size, "-byte device region")));
  out.mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = kMemLocationTypeDevice;
  access.location.id = device;
  access.flags = kMemAccessProtReadWrite;
  RETURN_IF_ERROR(driver->Check(api.cuMemSetAccess(out.base_, size, &access, 1),
                                "cuMemSetAccess (read-write) of the device region"));
  scope.reset();
  return out;
}

absl::Status DeviceMapping::CopyToHost(uint64_t offset, uint64_t length, void* out) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + length,
                                              ") lie outside the ", size_, "-byte device region"));
  }
  if (length == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::unique_ptr<ContextScope> scope, ContextScope::Enter(context_));
  return context_.driver()->Check(
      context_.driver()->api().cuMemcpyDtoH(out, base_ + offset, length), "cuMemcpyDtoH");
}

}  // namespace conveyor::client
