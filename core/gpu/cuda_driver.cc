#include "core/gpu/cuda_driver.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_error.h"

namespace conveyor::gpu {
namespace {

// The ABI the PFN_*_v* types above describe; every entry point used exists
// with that signature since CUDA 10.2, and CUDA 13's runtime needs a CUDA 13
// driver anyway.
constexpr unsigned int kDriverAbi = 12000;

std::atomic<const CudaDriver*> loaded{nullptr};

template <typename Fn>
absl::Status Lookup(const char* symbol, Fn* fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &p, kDriverAbi, cudaEnableDefault, &found);
  if (err != cudaSuccess) {
    absl::Status s = CudaError(absl::StrCat("no CUDA driver: looking up ", symbol), err);
    return absl::FailedPreconditionError(s.message());
  }
  if (found != cudaDriverEntryPointSuccess || p == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA driver has no ", symbol, " (driver too old)"));
  }
  *fn = reinterpret_cast<Fn>(p);
  return absl::OkStatus();
}

absl::StatusOr<const CudaDriver*> Load() {
  static CudaDriver table;
  CudaDriver d;
  for (absl::Status s : {
           Lookup("cuGetErrorName", &d.cuGetErrorName),
           Lookup("cuGetErrorString", &d.cuGetErrorString),
           Lookup("cuDeviceGet", &d.cuDeviceGet),
           Lookup("cuMemGetAllocationGranularity", &d.cuMemGetAllocationGranularity),
           Lookup("cuMemCreate", &d.cuMemCreate),
           Lookup("cuMemRelease", &d.cuMemRelease),
           Lookup("cuMemExportToShareableHandle", &d.cuMemExportToShareableHandle),
           Lookup("cuMemAddressReserve", &d.cuMemAddressReserve),
           Lookup("cuMemAddressFree", &d.cuMemAddressFree),
           Lookup("cuMemMap", &d.cuMemMap),
           Lookup("cuMemUnmap", &d.cuMemUnmap),
           Lookup("cuMemSetAccess", &d.cuMemSetAccess),
           Lookup("cuMemImportFromShareableHandle", &d.cuMemImportFromShareableHandle),
       }) {
    if (!s.ok()) return s;
  }
  table = d;
  return &table;
}

}  // namespace

absl::StatusOr<const CudaDriver*> GetCudaDriver() {
  static const absl::StatusOr<const CudaDriver*> result = [] {
    absl::StatusOr<const CudaDriver*> r = Load();
    if (r.ok()) loaded.store(*r, std::memory_order_release);
    return r;
  }();
  return result;
}

const CudaDriver* LoadedCudaDriver() { return loaded.load(std::memory_order_acquire); }

}  // namespace conveyor::gpu
