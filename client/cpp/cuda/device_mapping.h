// DeviceMapping: a DEVICE_MEMORY stream's ring of device buffers, imported
// into this process from the POSIX fd the daemon exported (CUDA virtual
// memory management): cuMemImportFromShareableHandle, cuMemAddressReserve,
// cuMemMap and cuMemSetAccess (read-write for the device), made with the
// device's primary context current. Destruction undoes them in reverse:
// unmap, free the address range, release the imported handle, release the
// context. The fd may be closed once Import() returned.
//
// The memory is the daemon's allocation: it stays alive while this mapping
// or the daemon holds it, and the driver drops this process's reference
// when the process dies (a killed client leaks nothing).
//
// Thread-safety: a value with one owner; base() may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/cpp/cuda/cuda_driver.h"
#include "client/cpp/cuda/primary_context.h"

namespace conveyor::client {

class DeviceMapping {
 public:
  DeviceMapping() = default;
  ~DeviceMapping();
  DeviceMapping(DeviceMapping&& other) noexcept;
  DeviceMapping& operator=(DeviceMapping&& other) noexcept;
  DeviceMapping(const DeviceMapping&) = delete;
  DeviceMapping& operator=(const DeviceMapping&) = delete;

  // Imports `size` bytes of the allocation behind `fd` (not owned) on the
  // device whose UUID is `gpu_uuid`. FAILED_PRECONDITION when that GPU is
  // not visible here; the driver's error (naming the call) otherwise.
  static absl::StatusOr<DeviceMapping> Import(std::shared_ptr<const CudaDriver> driver,
                                              const std::string& gpu_uuid, int fd, uint64_t size);

  // The device address of the first byte; 0 when not mapped.
  CUdeviceptr base() const { return base_; }
  uint64_t size() const { return size_; }

  // Copies [offset, offset + length) of the mapping to host memory `out`
  // (synchronous). OUT_OF_RANGE outside the mapping.
  absl::Status CopyToHost(uint64_t offset, uint64_t length, void* out) const;

 private:
  void Reset();
  PrimaryContext context_;
  CUmemGenericAllocationHandle handle_ = 0;
  bool have_handle_ = false;
  CUdeviceptr base_ = 0;  // reserved when != 0
  bool mapped_ = false;
  uint64_t size_ = 0;
};

}  // namespace conveyor::client
