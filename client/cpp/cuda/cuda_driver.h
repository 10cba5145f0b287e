// CudaDriver: the CUDA driver API as the C++ client uses it, loaded at run
// time with dlopen("libcuda.so.1") — never linked — so the client library
// builds without a CUDA toolkit and runs on hosts without a driver. Only the
// streams that ask for a GPU (pin_memory, DEVICE_MEMORY) load it; without a
// driver they fail with FAILED_PRECONDITION naming why (the dlopen error),
// and every other stream works as before.
//
// The few driver types used are declared here with the values of cuda.h
// (CUDA 11.x .. 13.x keep them), so no CUDA header is needed either. The
// library is never dlclose'd (the driver does not support being unloaded).
//
// CudaError(what, code) is the one place a CUresult becomes a Status:
// "WHAT: CUDA_ERROR_NAME (code N): description", with FAILED_PRECONDITION
// for errors of the machine (no driver, no device, stub library),
// RESOURCE_EXHAUSTED for out of memory, INTERNAL otherwise.
//
// Thread-safety: a loaded CudaDriver is immutable; its functions are the
// driver's (thread-safe). Default() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace conveyor::client {

// The driver's types (cuda.h), as plain C types.
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE
  int id;    // the device ordinal
};
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
};

inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorOutOfMemory = 2;
inline constexpr unsigned kMemHostRegisterPortable = 0x01;  // CU_MEMHOSTREGISTER_PORTABLE
inline constexpr unsigned kMemHostRegisterReadOnly = 0x08;  // CU_MEMHOSTREGISTER_READ_ONLY
// CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
inline constexpr int kAttributeReadOnlyHostRegisterSupported = 113;
inline constexpr int kMemHandleTypePosixFd = 0x1;    // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
inline constexpr int kMemLocationTypeDevice = 0x1;   // CU_MEM_LOCATION_TYPE_DEVICE
inline constexpr int kMemAccessProtReadWrite = 0x3;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE

// The library Default() loads.
inline constexpr char kCudaDriverLibrary[] = "libcuda.so.1";

class CudaDriver {
 public:
  // The driver functions (the _v2 symbols where cuda.h maps a name to one).
  struct Api {
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuGetErrorName)(CUresult error, const char** name);
    CUresult (*cuGetErrorString)(CUresult error, const char** text);
    CUresult (*cuDeviceGetCount)(int* count);
    CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
    CUresult (*cuDeviceGetUuid)(unsigned char* uuid, CUdevice device);  // 16 bytes (CUuuid)
    CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
    CUresult (*cuCtxPushCurrent)(CUcontext context);
    CUresult (*cuCtxPopCurrent)(CUcontext* context);
    CUresult (*cuMemHostRegister)(void* ptr, size_t size, unsigned flags);
    CUresult (*cuMemHostUnregister)(void* ptr);
    CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle* handle,
                                               void* os_handle, int handle_type);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
    CUresult (*cuMemAddressReserve)(CUdeviceptr* ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags);
    CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags);
    CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
    CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                               size_t count);
    CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  };

  // Loads `library` (a name dlopen searches, or a path), resolves every
  // function of Api and calls cuInit(0). FAILED_PRECONDITION naming the
  // library and the reason when it is missing, lacks a function or cuInit
  // fails (no device, the toolkit's stub library, an old driver).
  static absl::StatusOr<std::shared_ptr<const CudaDriver>> Load(const std::string& library);

  // The process's driver: Load(kCudaDriverLibrary) once; later calls return
  // the same driver or the same error.
  static absl::StatusOr<std::shared_ptr<const CudaDriver>> Default();

  // A driver over functions given by the caller, named `library` in
  // messages: the seam through which unit tests model the driver (every
  // function of `api` must be set; cuInit is not called).
  static std::shared_ptr<const CudaDriver> FromApi(const Api& api, std::string library);

  // OK for kCudaSuccess, else CudaError(what, result) with the driver's
  // name and description of `result`.
  absl::Status Check(CUresult result, absl::string_view what) const;

  // The ordinal of the device whose UUID is `uuid` ("GPU-…", the prefix and
  // letter case do not matter); device 0 when `uuid` is empty.
  // FAILED_PRECONDITION naming the UUIDs there are when none matches, or
  // when there is no device.
  absl::StatusOr<CUdevice> FindDevice(std::string_view uuid) const;

  const Api& api() const { return api_; }
  const std::string& library() const { return library_; }

 private:
  CudaDriver() = default;
  Api api_{};
  std::string library_;
};

// The status of a failed driver call (see the top of this file); `name` and
// `text` are the driver's name and description of `code` (nullptr: unknown).
absl::Status CudaError(absl::string_view what, CUresult code, const char* name = nullptr,
                       const char* text = nullptr);

}  // namespace conveyor::client
