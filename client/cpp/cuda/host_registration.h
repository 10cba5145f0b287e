// HostRegistration: host memory page-locked for CUDA (cuMemHostRegister),
// so that copies from it to a GPU are asynchronous DMA instead of staged,
// pageable copies. The client registers a SHARED_MEMORY stream's mapped
// memfd once (StreamOptions::pin_memory) and unregisters it on destruction,
// which must come before the memory is unmapped.
//
// The registration is PORTABLE (every context of the process sees the
// memory as pinned, not only the one current when it was made) and
// READ_ONLY (the client maps the slots read-only; the GPU only reads them),
// made with the device's primary context current.
//
// Thread-safety: a value with one owner.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "client/cpp/cuda/cuda_driver.h"
#include "client/cpp/cuda/primary_context.h"

namespace conveyor::client {

class HostRegistration {
 public:
  HostRegistration() = default;
  ~HostRegistration();
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  // Page-locks [data, data + size) for the device whose UUID is `gpu_uuid`
  // (device 0 when empty). FAILED_PRECONDITION naming why when the device
  // is not there or cannot register read-only memory; the driver's error
  // otherwise.
  static absl::StatusOr<HostRegistration> Register(std::shared_ptr<const CudaDriver> driver,
                                                   const std::string& gpu_uuid, const void* data,
                                                   size_t size);

  bool registered() const { return data_ != nullptr; }

 private:
  void Reset();
  PrimaryContext context_;
  void* data_ = nullptr;
};

}  // namespace conveyor::client
