#include "core/gpu/cuda_error.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_driver.h"

namespace conveyor::gpu {
namespace {

absl::Status Make(absl::StatusCode code, std::string_view what, const char* name,
                  const char* text) {
  return absl::Status(code, absl::StrCat(std::string(what), ": ", name, " (", text, ")"));
}

}  // namespace

absl::Status CudaError(std::string_view what, cudaError_t code) {
  if (code == cudaSuccess) return absl::OkStatus();
  absl::StatusCode status = absl::StatusCode::kInternal;
  switch (code) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorNotSupported:
    case cudaErrorInitializationError:
    case cudaErrorSystemNotReady: status = absl::StatusCode::kFailedPrecondition; break;
    case cudaErrorMemoryAllocation: status = absl::StatusCode::kResourceExhausted; break;
    default: break;
  }
  return Make(status, what, cudaGetErrorName(code), cudaGetErrorString(code));
}

absl::Status CudaError(std::string_view what, CUresult code) {
  if (code == CUDA_SUCCESS) return absl::OkStatus();
  absl::StatusCode status = absl::StatusCode::kInternal;
  switch (code) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_SYSTEM_NOT_READY: status = absl::StatusCode::kFailedPrecondition; break;
    case CUDA_ERROR_OUT_OF_MEMORY: status = absl::StatusCode::kResourceExhausted; break;
    default: break;
  }
  const char* name = nullptr;
  const char* text = nullptr;
  if (const CudaDriver* driver = LoadedCudaDriver(); driver != nullptr) {
    driver->cuGetErrorName(code, &name);
    driver->cuGetErrorString(code, &text);
  }
  const std::string number = absl::StrCat("CUresult ", static_cast<int>(code));
  return Make(status, what, name != nullptr ? name : number.c_str(),
              text != nullptr ? text : "no text: driver not loaded");
}

}  // namespace conveyor::gpu
