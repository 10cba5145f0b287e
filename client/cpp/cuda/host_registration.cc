#include "client/cpp/cuda/host_registration.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace conveyor::client {

HostRegistration::~HostRegistration() { Reset(); }

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : context_(std::move(other.context_)), data_(std::exchange(other.data_, nullptr)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    Reset();
    context_ = std::move(other.context_);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

void HostRegistration::Reset() {
  if (data_ == nullptr) return;
  // A failure here (the context is gone) leaves nothing to undo.
  if (absl::StatusOr<std::unique_ptr<ContextScope>> scope = ContextScope::Enter(context_);
      scope.ok()) {
    context_.driver()->api().cuMemHostUnregister(data_);
  }
  data_ = nullptr;
  context_ = PrimaryContext();
}

absl::StatusOr<HostRegistration> HostRegistration::Register(
    std::shared_ptr<const CudaDriver> driver, const std::string& gpu_uuid, const void* data,
    size_t size) {
  ASSIGN_OR_RETURN(const CUdevice device, driver->FindDevice(gpu_uuid));
  int read_only = 0;
  RETURN_IF_ERROR(driver->Check(driver->api().cuDeviceGetAttribute(
                                    &read_only, kAttributeReadOnlyHostRegisterSupported, device),
                                "cuDeviceGetAttribute(READ_ONLY_HOST_REGISTER_SUPPORTED)"));
  if (read_only == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pin_memory: CUDA device ", device,
        " cannot page-lock read-only memory (READ_ONLY_HOST_REGISTER_SUPPORTED is 0)"));
  }
  HostRegistration out;
  ASSIGN_OR_RETURN(out.context_, PrimaryContext::Retain(driver, device));
  ASSIGN_OR_RETURN(std::unique_ptr<ContextScope> scope, ContextScope::Enter(out.context_));
  void* ptr = const_cast<void*>(data);
  RETURN_IF_ERROR(driver->Check(
      driver->api().cuMemHostRegister(ptr, size,
                                      kMemHostRegisterPortable | kMemHostRegisterReadOnly),
      absl::StrCat("pin_memory: cuMemHostRegister of the ", size, "-byte slot region")));
  out.data_ = ptr;
  return out;
}

}  // namespace conveyor::client
