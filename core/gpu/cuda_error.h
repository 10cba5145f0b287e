// CudaError: one absl::Status for a failed CUDA call, runtime (cudaError_t)
// or driver (CUresult), naming the call and CUDA's error name and text.
// FAILED_PRECONDITION where the machine cannot do it (no driver, a stub or
// too old driver, no device, no kernel image for this GPU, not supported),
// RESOURCE_EXHAUSTED for out of memory, INTERNAL otherwise.
// Thread-safety: pure functions (the driver's error text is looked up
// through the driver table, core/gpu/cuda_driver.h, once it is loaded).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"

namespace conveyor::gpu {

absl::Status CudaError(std::string_view what, cudaError_t code);
absl::Status CudaError(std::string_view what, CUresult code);

}  // namespace conveyor::gpu
