// CudaDriver: the CUDA driver API entry points the device path uses (the
// virtual memory API for POSIX-fd shareable device memory, and error text),
// looked up at run time through the statically linked CUDA runtime
// (cudaGetDriverEntryPointByVersion), so that no binary links libcuda.so and
// conveyord starts on hosts without a driver.
//
// Thread-safety: GetCudaDriver() loads the table once (thread-safe); the
// table is immutable afterwards and lives for the process.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "absl/status/statusor.h"

namespace conveyor::gpu {

struct CudaDriver {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuDeviceGet_v2000 cuDeviceGet = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 cuMemExportToShareableHandle = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  // The importer's side (clients, tests).
  PFN_cuMemImportFromShareableHandle_v10020 cuMemImportFromShareableHandle = nullptr;
};

// The table, loaded on the first call: FAILED_PRECONDITION naming the
// missing driver or entry point when it cannot be.
absl::StatusOr<const CudaDriver*> GetCudaDriver();

// The table if an earlier GetCudaDriver() loaded it, else null (CudaError's
// error text; never loads).
const CudaDriver* LoadedCudaDriver();

}  // namespace conveyor::gpu
