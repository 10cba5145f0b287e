#include "client/cpp/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/cuda/gpu_uuid.h"

namespace conveyor::client {
namespace {

// Resolves `name` into `*fn`; false (and `*missing` names it) when absent.
template <typename Fn>
void Resolve(void* handle, const char* name, Fn* fn, std::vector<std::string>* missing) {
  *fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*fn == nullptr) missing->push_back(name);
}

absl::StatusCode CodeOf(CUresult code) {
  switch (code) {
    case kCudaErrorOutOfMemory: return absl::StatusCode::kResourceExhausted;
    case 3:    // CUDA_ERROR_NOT_INITIALIZED
    case 4:    // CUDA_ERROR_DEINITIALIZED
    case 34:   // CUDA_ERROR_STUB_LIBRARY
    case 35:   // CUDA_ERROR_INSUFFICIENT_DRIVER
    case 46:   // CUDA_ERROR_DEVICES_UNAVAILABLE
    case 100:  // CUDA_ERROR_NO_DEVICE
    case 101:  // CUDA_ERROR_INVALID_DEVICE
    case 217:  // CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    case 801:  // CUDA_ERROR_NOT_SUPPORTED
    case 999:  // CUDA_ERROR_UNKNOWN (often a driver/device mismatch)
      return absl::StatusCode::kFailedPrecondition;
    default: return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status CudaError(absl::string_view what, CUresult code, const char* name, const char* text) {
  return absl::Status(
      CodeOf(code), absl::StrCat(what, ": ", name != nullptr ? name : "CUDA error", " (code ", code,
                                 ")", text != nullptr ? ": " : "", text != nullptr ? text : ""));
}

absl::StatusOr<std::shared_ptr<const CudaDriver>> CudaDriver::Load(const std::string& library) {
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace.
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver is not available: dlopen(", library,
                     ") failed: ", why != nullptr ? why : "unknown error",
                     " (is the NVIDIA driver installed and visible to this process?)"));
  }
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->library_ = library;
  Api& a = driver->api_;
  std::vector<std::string> missing;
  Resolve(handle, "cuInit", &a.cuInit, &missing);
  Resolve(handle, "cuGetErrorName", &a.cuGetErrorName, &missing);
  Resolve(handle, "cuGetErrorString", &a.cuGetErrorString, &missing);
  Resolve(handle, "cuDeviceGetCount", &a.cuDeviceGetCount, &missing);
  Resolve(handle, "cuDeviceGet", &a.cuDeviceGet, &missing);
  Resolve(handle, "cuDeviceGetUuid_v2", &a.cuDeviceGetUuid, &missing);
  Resolve(handle, "cuDeviceGetAttribute", &a.cuDeviceGetAttribute, &missing);
  Resolve(handle, "cuDevicePrimaryCtxRetain", &a.cuDevicePrimaryCtxRetain, &missing);
  Resolve(handle, "cuDevicePrimaryCtxRelease_v2", &a.cuDevicePrimaryCtxRelease, &missing);
  Resolve(handle, "cuCtxPushCurrent_v2", &a.cuCtxPushCurrent, &missing);
  Resolve(handle, "cuCtxPopCurrent_v2", &a.cuCtxPopCurrent, &missing);
  Resolve(handle, "cuMemHostRegister_v2", &a.cuMemHostRegister, &missing);
  Resolve(handle, "cuMemHostUnregister", &a.cuMemHostUnregister, &missing);
  Resolve(handle, "cuMemImportFromShareableHandle", &a.cuMemImportFromShareableHandle, &missing);
  Resolve(handle, "cuMemRelease", &a.cuMemRelease, &missing);
  Resolve(handle, "cuMemAddressReserve", &a.cuMemAddressReserve, &missing);
  Resolve(handle, "cuMemAddressFree", &a.cuMemAddressFree, &missing);
  Resolve(handle, "cuMemMap", &a.cuMemMap, &missing);
  Resolve(handle, "cuMemUnmap", &a.cuMemUnmap, &missing);
  Resolve(handle, "cuMemSetAccess", &a.cuMemSetAccess, &missing);
  Resolve(handle, "cuMemcpyDtoH_v2", &a.cuMemcpyDtoH, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver ", library, " is too old or not a CUDA driver: it lacks ",
                     absl::StrJoin(missing, ", "), " (CUDA 11.4 or newer is needed)"));
  }
  if (absl::Status s = driver->Check(a.cuInit(0), absl::StrCat("cuInit of ", library)); !s.ok()) {
    return absl::FailedPreconditionError(s.message());
  }
  return std::shared_ptr<const CudaDriver>(std::move(driver));
}

std::shared_ptr<const CudaDriver> CudaDriver::FromApi(const Api& api, std::string library) {
  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->api_ = api;
  driver->library_ = std::move(library);
  return driver;
}

absl::StatusOr<std::shared_ptr<const CudaDriver>> CudaDriver::Default() {
  static const auto* const kDriver =
      new absl::StatusOr<std::shared_ptr<const CudaDriver>>(Load(kCudaDriverLibrary));
  return *kDriver;
}

absl::Status CudaDriver::Check(CUresult result, absl::string_view what) const {
  if (result == kCudaSuccess) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_.cuGetErrorName(result, &name) != kCudaSuccess) name = nullptr;
  if (api_.cuGetErrorString(result, &text) != kCudaSuccess) text = nullptr;
  return CudaError(what, result, name, text);
}

absl::StatusOr<CUdevice> CudaDriver::FindDevice(std::string_view uuid) const {
  int count = 0;
  if (absl::Status s = Check(api_.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) return s;
  if (count == 0) return absl::FailedPreconditionError("no CUDA device is visible to this process");
  std::vector<std::string> seen;
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    if (absl::Status s = Check(api_.cuDeviceGet(&device, i), "cuDeviceGet"); !s.ok()) return s;
    if (uuid.empty()) return device;
    unsigned char bytes[16] = {};
    if (absl::Status s = Check(api_.cuDeviceGetUuid(bytes, device), "cuDeviceGetUuid"); !s.ok()) {
      return s;
    }
    std::string name = FormatGpuUuid(bytes);
    if (SameGpuUuid(name, uuid)) return device;
    seen.push_back(std::move(name));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("no visible CUDA device has UUID ", absl::string_view(uuid.data(), uuid.size()),
                   "; this process sees ", absl::StrJoin(seen, ", ")));
}

}  // namespace conveyor::client
