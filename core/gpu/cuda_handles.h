// UniqueHandle (core/gpu/unique_handle.h) traits for every CUDA handle the
// device path holds: streams, events, host registrations (runtime API) and
// the virtual memory API's allocation handles, reserved address ranges and
// mappings (driver API, through core/gpu/cuda_driver.h). Releasing one
// cannot fail in a way the owner could act on; an error is logged.
// Thread-safety: like any value, one owner at a time.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/gpu/cuda_driver.h"
#include "core/gpu/unique_handle.h"
#include "spdlog/spdlog.h"

namespace conveyor::gpu {

namespace cuda_handles_internal {
inline void Warn(const char* what, int code) {
  if (code != 0) spdlog::warn("gpu: {} failed (CUDA error {})", what, code);
}
}  // namespace cuda_handles_internal

struct CudaStreamTraits {
  using Handle = cudaStream_t;
  static Handle Null() { return nullptr; }
  static bool IsNull(Handle h) { return h == nullptr; }
  static void Close(Handle h) {
    cuda_handles_internal::Warn("cudaStreamDestroy", cudaStreamDestroy(h));
  }
};
using UniqueCudaStream = UniqueHandle<CudaStreamTraits>;

struct CudaEventTraits {
  using Handle = cudaEvent_t;
  static Handle Null() { return nullptr; }
  static bool IsNull(Handle h) { return h == nullptr; }
  static void Close(Handle h) {
    cuda_handles_internal::Warn("cudaEventDestroy", cudaEventDestroy(h));
  }
};
using UniqueCudaEvent = UniqueHandle<CudaEventTraits>;

// A cudaHostRegister'ed range, by its start.
struct CudaHostRegistrationTraits {
  using Handle = void*;
  static Handle Null() { return nullptr; }
  static bool IsNull(Handle h) { return h == nullptr; }
  static void Close(Handle h) {
    cuda_handles_internal::Warn("cudaHostUnregister", cudaHostUnregister(h));
  }
};
using UniqueCudaHostRegistration = UniqueHandle<CudaHostRegistrationTraits>;

// A cuMemCreate'd physical allocation.
struct CuMemHandleTraits {
  using Handle = CUmemGenericAllocationHandle;
  static Handle Null() { return 0; }
  static bool IsNull(Handle h) { return h == 0; }
  static void Close(Handle h) {
    if (const CudaDriver* d = LoadedCudaDriver()) {
      cuda_handles_internal::Warn("cuMemRelease", d->cuMemRelease(h));
    }
  }
};
using UniqueCuMemHandle = UniqueHandle<CuMemHandleTraits>;

// A device address range: reserved (cuMemAddressReserve) or mapped (cuMemMap).
struct CuRange {
  CUdeviceptr ptr = 0;
  size_t size = 0;
};

struct CuReservationTraits {
  using Handle = CuRange;
  static Handle Null() { return {}; }
  static bool IsNull(const Handle& h) { return h.ptr == 0; }
  static void Close(const Handle& h) {
    if (const CudaDriver* d = LoadedCudaDriver()) {
      cuda_handles_internal::Warn("cuMemAddressFree", d->cuMemAddressFree(h.ptr, h.size));
    }
  }
};
using UniqueCuReservation = UniqueHandle<CuReservationTraits>;

struct CuMappingTraits {
  using Handle = CuRange;
  static Handle Null() { return {}; }
  static bool IsNull(const Handle& h) { return h.ptr == 0; }
  static void Close(const Handle& h) {
    if (const CudaDriver* d = LoadedCudaDriver()) {
      cuda_handles_internal::Warn("cuMemUnmap", d->cuMemUnmap(h.ptr, h.size));
    }
  }
};
using UniqueCuMapping = UniqueHandle<CuMappingTraits>;

}  // namespace conveyor::gpu
