// The CUDA implementation of the device API (core/gpu/device_api.h), built
// when CONVEYOR_HAVE_CUDA: the CUDA runtime linked statically and the
// driver's virtual memory API looked up at run time (core/gpu/cuda_driver.h).
//
//   Devices      cudaGetDeviceCount / cudaGetDeviceProperties; UUIDs as
//                nvidia-smi prints them. No driver or no device:
//                FAILED_PRECONDITION saying which.
//   Allocate     cuMemCreate (pinned device memory, POSIX-fd shareable),
//                size rounded to the granularity, cuMemAddressReserve +
//                cuMemMap + cuMemSetAccess (read-write for the device);
//                ExportFd: cuMemExportToShareableHandle.
//   RegisterHost cudaHostRegister (portable).
//   CreateQueue  a non-blocking stream on the device; CopyToDevice:
//                cudaMemcpyAsync H2D; Convert: the kernel
//                (core/gpu/convert_kernel.cu); OnComplete: an event recorded
//                on the stream, waited for by the queue's completion thread.
//
// Thread-safety: as DeviceApi (any thread; each call makes the device
// current on the calling thread first).
#pragma once

#include <memory>

#include "core/gpu/device_api.h"

namespace conveyor::gpu {

std::unique_ptr<DeviceApi> NewCudaDeviceApi();

}  // namespace conveyor::gpu
