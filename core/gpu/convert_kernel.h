// The conversion kernel's launcher (core/gpu/convert_kernel.cu, compiled by
// nvcc): queues the uint8 → dtype conversion of params.elements values on a
// CUDA stream with the grid-stride geometry of core/gpu/convert.h.
// Declared without CUDA or abseil types so that g++ and nvcc both read it.
// Thread-safety: as the CUDA stream it is given.
#pragma once

#include <cstdint>

#include "core/gpu/convert.h"
#include "core/gpu/device_dtype.h"

namespace conveyor::gpu {

// `stream` is a cudaStream_t; `dst` and `src` device addresses. Returns the
// launch's cudaError_t (0: queued; nothing is queued for 0 elements).
int LaunchConvertKernel(void* stream, uint64_t dst, uint64_t src, DeviceDType dtype,
                        const ConvertParams& params);

}  // namespace conveyor::gpu
