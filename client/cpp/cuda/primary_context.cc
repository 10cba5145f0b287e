#include "client/cpp/cuda/primary_context.h"

#include "absl/strings/str_cat.h"

namespace conveyor::client {

PrimaryContext::~PrimaryContext() { Reset(); }

PrimaryContext::PrimaryContext(PrimaryContext&& other) noexcept
    : driver_(std::move(other.driver_)),
      device_(other.device_),
      context_(std::exchange(other.context_, nullptr)) {}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& other) noexcept {
  if (this != &other) {
    Reset();
    driver_ = std::move(other.driver_);
    device_ = other.device_;
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

void PrimaryContext::Reset() {
  if (context_ != nullptr) driver_->api().cuDevicePrimaryCtxRelease(device_);
  context_ = nullptr;
}

absl::StatusOr<PrimaryContext> PrimaryContext::Retain(std::shared_ptr<const CudaDriver> driver,
                                                      CUdevice device) {
  PrimaryContext out;
  CUcontext context = nullptr;
  absl::Status s = driver->Check(driver->api().cuDevicePrimaryCtxRetain(&context, device),
                                 absl::StrCat("cuDevicePrimaryCtxRetain of device ", device));
  if (!s.ok()) return s;
  out.driver_ = std::move(driver);
  out.device_ = device;
  out.context_ = context;
  return out;
}

absl::StatusOr<std::unique_ptr<ContextScope>> ContextScope::Enter(const PrimaryContext& context) {
  const CudaDriver* driver = context.driver().get();
  absl::Status s = driver->Check(driver->api().cuCtxPushCurrent(context.get()), "cuCtxPushCurrent");
  if (!s.ok()) return s;
  return std::unique_ptr<ContextScope>(new ContextScope(driver));
}

ContextScope::~ContextScope() {
  CUcontext popped = nullptr;
  driver_->api().cuCtxPopCurrent(&popped);
}

}  // namespace conveyor::client
