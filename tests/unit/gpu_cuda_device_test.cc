// The CUDA device API (core/gpu/cuda_device_api.h) on a real GPU: devices
// and UUIDs, VMM allocation, its POSIX fd imported and read back, host
// registration, queued copies, the conversion kernel bit-exact with the host
// math for odd sizes and every dtype, completions (on another thread, in
// order, also on destruction), out-of-memory refusal.
//
// Its own binary (gpu_cuda_device_test, tests/CMakeLists.txt): without a
// CUDA device it prints "skipped: no CUDA device" and exits 77, which CTest
// shows as Skipped. conveyor_unit_tests globs every tests/unit/*.cc, so the
// file's content is compiled only where CONVEYOR_GPU_DEVICE_TEST is defined
// (the device test's target).
#ifdef CONVEYOR_GPU_DEVICE_TEST

#define CATCH_CONFIG_RUNNER
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <regex>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/gpu/convert.h"
#include "core/gpu/convert_spec.h"
#include "core/gpu/cuda_driver.h"
#include "core/gpu/device_api.h"

namespace conveyor::gpu {
namespace {

std::unique_ptr<DeviceApi>& Api() {
  static std::unique_ptr<DeviceApi> api = MakeDeviceApi();
  return api;
}

template <typename T>
T Ok(absl::StatusOr<T> v) {
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  return std::move(*v);
}

DeviceInfo First() { return Ok(Api()->Devices()).front(); }

std::vector<uint8_t> ReadBack(uint64_t address, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  REQUIRE(cudaMemcpy(out.data(), reinterpret_cast<void*>(address), bytes, cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  return out;
}

absl::Status Drain(DeviceQueue& q) {
  std::promise<absl::Status> p;
  const absl::Status queued = q.OnComplete([&](absl::Status s) { p.set_value(s); });
  if (!queued.ok()) return queued;
  return p.get_future().get();
}

struct Pinned {
  Pinned(DeviceApi& api, size_t n) : bytes(n) {
    p = static_cast<uint8_t*>(
        ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
    reg = Ok(api.RegisterHost(p, n));
  }
  ~Pinned() {
    reg.reset();
    ::munmap(p, bytes);
  }
  uint8_t* p;
  size_t bytes;
  std::unique_ptr<HostRegistration> reg;
};

}  // namespace

TEST_CASE("gpu cuda: devices have nvidia-smi UUIDs and are found by them", "[gpu][cuda]") {
  const std::vector<DeviceInfo> devices = Ok(Api()->Devices());
  REQUIRE(!devices.empty());
  const std::regex uuid("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  for (const DeviceInfo& d : devices) {
    INFO(d.uuid << " " << d.name);
    CHECK(std::regex_match(d.uuid, uuid));
    CHECK(d.total_bytes > 0);
    CHECK(!d.name.empty());
    const std::string bare = d.uuid.substr(4);
    CHECK(Ok(Api()->Find(bare)).ordinal == d.ordinal);
  }
  CHECK(
      absl::IsFailedPrecondition(Api()->Find("GPU-00000000-0000-0000-0000-000000000000").status()));
}

TEST_CASE("gpu cuda: allocate, copy, complete, export and import the fd", "[gpu][cuda]") {
  DeviceApi& api = *Api();
  const DeviceInfo gpu = First();
  auto alloc = Ok(api.Allocate(gpu, 3 * 1000 * 1000 + 1));
  CHECK(alloc->bytes() >= 3 * 1000 * 1000 + 1);
  auto queue = Ok(api.CreateQueue(gpu));
  const size_t n = 1 << 20;
  Pinned host(api, n);
  for (size_t i = 0; i < n; ++i) host.p[i] = static_cast<uint8_t>(i * 7 + 3);
  REQUIRE(queue->CopyToDevice(alloc->device_address() + 4096, host.p, n).ok());
  // (Catch's assertions are not thread-safe: the callbacks only record.)
  std::promise<std::pair<absl::Status, std::thread::id>> ran;
  REQUIRE(queue
              ->OnComplete([&](absl::Status s) {
                ran.set_value({std::move(s), std::this_thread::get_id()});
              })
              .ok());
  const auto [copied, ran_on] = ran.get_future().get();
  CHECK(copied.ok());
  CHECK(ran_on != std::this_thread::get_id());
  CHECK(ReadBack(alloc->device_address() + 4096, n) == std::vector<uint8_t>(host.p, host.p + n));

  // The fd maps the same memory (as a client process would import it).
  UniqueFd fd = Ok(alloc->ExportFd());
  REQUIRE(fd.valid());
  const CudaDriver* d = Ok(GetCudaDriver());
  CUmemGenericAllocationHandle imported = 0;
  REQUIRE(d->cuMemImportFromShareableHandle(
              &imported, reinterpret_cast<void*>(static_cast<uintptr_t>(fd.get())),
              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  REQUIRE(d->cuMemAddressReserve(&ptr, alloc->bytes(), 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(d->cuMemMap(ptr, alloc->bytes(), 0, imported, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = gpu.ordinal;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  REQUIRE(d->cuMemSetAccess(ptr, alloc->bytes(), &access, 1) == CUDA_SUCCESS);
  CHECK(ReadBack(ptr + 4096, n) == std::vector<uint8_t>(host.p, host.p + n));
  CHECK(d->cuMemUnmap(ptr, alloc->bytes()) == CUDA_SUCCESS);
  CHECK(d->cuMemAddressFree(ptr, alloc->bytes()) == CUDA_SUCCESS);
  CHECK(d->cuMemRelease(imported) == CUDA_SUCCESS);
}

TEST_CASE("gpu cuda: the kernel is bit-exact with the host math for odd sizes", "[gpu][cuda]") {
  DeviceApi& api = *Api();
  const DeviceInfo gpu = First();
  auto queue = Ok(api.CreateQueue(gpu));
  for (const uint64_t pixels :
       {uint64_t{1}, uint64_t{7}, uint64_t{255}, uint64_t{65537}, uint64_t{224} * 224 * 5 + 1}) {
    const uint64_t n = pixels * 3;
    Pinned host(api, n);
    for (uint64_t i = 0; i < n; ++i) host.p[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
    auto in = Ok(api.Allocate(gpu, n));
    auto out = Ok(api.Allocate(gpu, n * 4));
    REQUIRE(queue->CopyToDevice(in->device_address(), host.p, n).ok());
    for (const DeviceDType dtype : {DeviceDType::kUint8, DeviceDType::kFloat32,
                                    DeviceDType::kFloat16, DeviceDType::kBFloat16}) {
      for (const bool channels_last : {false, true}) {
        ConvertSpec spec;
        spec.dtype = dtype;
        spec.elements = n;
        spec.plane = pixels;
        spec.channels_last = channels_last;
        spec.mean = {0.1f, -0.25f, 0.5f};
        spec.std = {0.3f, 0.7f, 0.0625f};
        REQUIRE(queue->Convert(out->device_address(), in->device_address(), spec).ok());
        REQUIRE(Drain(*queue).ok());
        const uint64_t bytes = n * DeviceDTypeBytes(dtype);
        std::vector<uint8_t> expect(bytes);
        ConvertOnHost(expect.data(), host.p, dtype, ParamsOf(spec));
        INFO("pixels " << pixels << " " << DeviceDTypeName(dtype) << " NHWC " << channels_last);
        REQUIRE(ReadBack(out->device_address(), bytes) == expect);
      }
    }
  }
}

TEST_CASE("gpu cuda: completions run in order, also when the queue goes first", "[gpu][cuda]") {
  DeviceApi& api = *Api();
  const DeviceInfo gpu = First();
  auto alloc = Ok(api.Allocate(gpu, 64 << 20));
  auto queue = Ok(api.CreateQueue(gpu));
  Pinned host(api, 64 << 20);
  std::vector<int> order;  // by the completion thread; read after the join
  for (int i = 0; i < 8; ++i) {
    REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, host.bytes).ok());
    REQUIRE(
        queue->OnComplete([&order, i](absl::Status s) { order.push_back(s.ok() ? i : -1); }).ok());
  }
  queue.reset();
  CHECK(order == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("gpu cuda: more than the GPU's memory is RESOURCE_EXHAUSTED", "[gpu][cuda]") {
  const DeviceInfo gpu = First();
  const auto too_much = Api()->Allocate(gpu, gpu.total_bytes * 2);
  INFO(too_much.status().ToString());
  CHECK(absl::IsResourceExhausted(too_much.status()));
}

}  // namespace conveyor::gpu

int main(int argc, char** argv) {
  const auto devices = conveyor::gpu::Api()->Devices();
  if (!devices.ok()) {
    std::printf("skipped: no CUDA device (%s)\n", std::string(devices.status().message()).c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

#endif  // CONVEYOR_GPU_DEVICE_TEST
