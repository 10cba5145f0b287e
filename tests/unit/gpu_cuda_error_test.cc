// core/gpu/cuda_error.h: CUDA error codes as statuses (runtime and driver),
// and, on a host without a driver, the CUDA device API's FAILED_PRECONDITION
// naming why. Needs no GPU; compiled only in builds with CUDA
// (tests/CMakeLists.txt defines CONVEYOR_HAVE_CUDA for this file alone).
#ifdef CONVEYOR_HAVE_CUDA

#include "core/gpu/cuda_error.h"

#include <string>

#include <catch2/catch.hpp>

#include "core/gpu/device_api.h"

namespace conveyor::gpu {

TEST_CASE("gpu cuda error: runtime codes", "[gpu][cuda_error]") {
  CHECK(CudaError("x", cudaSuccess).ok());
  const absl::Status no_device = CudaError("cudaGetDeviceCount", cudaErrorNoDevice);
  CHECK(absl::IsFailedPrecondition(no_device));
  CHECK(no_device.message().find("cudaGetDeviceCount: cudaErrorNoDevice (") == 0);
  CHECK(absl::IsFailedPrecondition(CudaError("x", cudaErrorInsufficientDriver)));
  CHECK(absl::IsFailedPrecondition(CudaError("x", cudaErrorStubLibrary)));
  CHECK(absl::IsResourceExhausted(CudaError("x", cudaErrorMemoryAllocation)));
  const absl::Status illegal = CudaError("copy", cudaErrorIllegalAddress);
  CHECK(absl::IsInternal(illegal));
  CHECK(illegal.message().find("cudaErrorIllegalAddress") != std::string::npos);
}

TEST_CASE("gpu cuda error: driver codes", "[gpu][cuda_error]") {
  CHECK(CudaError("x", CUDA_SUCCESS).ok());
  CHECK(absl::IsFailedPrecondition(CudaError("x", CUDA_ERROR_NO_DEVICE)));
  CHECK(absl::IsFailedPrecondition(CudaError("x", CUDA_ERROR_NOT_SUPPORTED)));
  const absl::Status oom = CudaError("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
  CHECK(absl::IsResourceExhausted(oom));
  CHECK(oom.message().find("cuMemCreate: ") == 0);
  CHECK(absl::IsInternal(CudaError("x", CUDA_ERROR_ILLEGAL_ADDRESS)));
}

TEST_CASE("gpu cuda error: without a driver the device API says so", "[gpu][cuda_error]") {
  std::unique_ptr<DeviceApi> api = MakeDeviceApi();
  REQUIRE(api->name() == "cuda");
  const auto devices = api->Devices();
  if (devices.ok()) SUCCEED("this host has a CUDA device");
  if (!devices.ok()) {
    INFO(devices.status().ToString());
    CHECK(absl::IsFailedPrecondition(devices.status()));
    const std::string msg(devices.status().message());
    CHECK((msg.find("no CUDA driver") == 0 || msg.find("no CUDA device") == 0));
    CHECK(
        absl::IsFailedPrecondition(api->Find("GPU-00000000-0000-0000-0000-000000000000").status()));
  }
}

}  // namespace conveyor::gpu

#endif  // CONVEYOR_HAVE_CUDA
