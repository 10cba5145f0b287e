// Tests of the C++ client's transport objects (client/cpp/transport) and its
// CUDA pieces (client/cpp/cuda) without a GPU: the host transports over a
// memfd and a message, the device transport over the daemon's host model
// (a memfd), and pin_memory and the device import over a model of the CUDA
// driver (CudaDriver::FromApi) that records every call, so the order of
// registration, import and teardown is checked. The real driver is tried
// only where the toolkit's stub library is (it has no GPU behind it: the
// error must say so).
#if defined(CONVEYOR_HAVE_CLIENT)

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "client/cpp/cuda/cuda_driver.h"
#include "client/cpp/cuda/device_mapping.h"
#include "client/cpp/cuda/gpu_uuid.h"
#include "client/cpp/cuda/host_registration.h"
#include "client/cpp/transport/device_memory_transport.h"
#include "client/cpp/transport/inline_transport.h"
#include "client/cpp/transport/open_transport.h"
#include "client/cpp/transport/shared_memory_transport.h"
#include "core/base/unique_fd.h"

namespace conveyor::client {
namespace {

// A memfd of `size` bytes holding 0, 1, 2, ... (mod 251).
UniqueFd PatternMemfd(size_t size) {
  UniqueFd fd(::memfd_create("transport-test", MFD_CLOEXEC));
  REQUIRE(fd.valid());
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i % 251);
  REQUIRE(::pwrite(fd.get(), bytes.data(), size, 0) == static_cast<ssize_t>(size));
  return fd;
}

v1::Batch BatchOf(uint64_t offset, uint64_t bytes, uint32_t slot = 0) {
  v1::Batch b;
  b.set_slot(slot);
  b.set_images_offset(offset);
  b.set_images_bytes(bytes);
  return b;
}

// --- a model of the CUDA driver -------------------------------------------

struct FakeCuda {
  std::vector<std::string> calls;
  int devices = 2;
  unsigned char uuid[2][16] = {{0x8c, 0x5b, 0x0c, 0x1e, 0x6f, 0x1d, 0x4c, 0x1e, 0x9d, 0x2a, 0x01,
                                0x23, 0x45, 0x67, 0x89, 0xab},
                               {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb,
                                0xcc, 0xdd, 0xee, 0xff, 0x00}};
  int read_only_supported = 1;
  int ctx_depth = 0;
  CUresult fail_map = 0;  // cuMemMap's result
  unsigned register_flags = 0;
  const void* registered = nullptr;
  int imported_fd = -1;
  std::vector<uint8_t> device_bytes;  // what cuMemcpyDtoH reads, from base
};
FakeCuda* fake = nullptr;
constexpr CUdeviceptr kBase = 0x7f0000000000ull;
CUcontext kCtx = reinterpret_cast<CUcontext>(0x1234);

CudaDriver::Api FakeApi() {
  CudaDriver::Api a{};
  a.cuInit = [](unsigned) -> CUresult { return 0; };
  a.cuGetErrorName = [](CUresult e, const char** n) -> CUresult {
    *n = e == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
    return 0;
  };
  a.cuGetErrorString = [](CUresult, const char** t) -> CUresult {
    *t = "as the model says";
    return 0;
  };
  a.cuDeviceGetCount = [](int* n) -> CUresult {
    *n = fake->devices;
    return 0;
  };
  a.cuDeviceGet = [](CUdevice* d, int i) -> CUresult {
    *d = i;
    return 0;
  };
  a.cuDeviceGetUuid = [](unsigned char* u, CUdevice d) -> CUresult {
    std::memcpy(u, fake->uuid[d], 16);
    return 0;
  };
  a.cuDeviceGetAttribute = [](int* v, int attr, CUdevice) -> CUresult {
    *v = attr == kAttributeReadOnlyHostRegisterSupported ? fake->read_only_supported : 0;
    return 0;
  };
  a.cuDevicePrimaryCtxRetain = [](CUcontext* c, CUdevice d) -> CUresult {
    fake->calls.push_back("retain " + std::to_string(d));
    *c = kCtx;
    return 0;
  };
  a.cuDevicePrimaryCtxRelease = [](CUdevice d) -> CUresult {
    fake->calls.push_back("release " + std::to_string(d));
    return 0;
  };
  a.cuCtxPushCurrent = [](CUcontext c) -> CUresult {
    if (c != kCtx) return 201;  // CUDA_ERROR_INVALID_CONTEXT
    ++fake->ctx_depth;
    return 0;
  };
  a.cuCtxPopCurrent = [](CUcontext* c) -> CUresult {
    --fake->ctx_depth;
    *c = kCtx;
    return 0;
  };
  a.cuMemHostRegister = [](void* p, size_t size, unsigned flags) -> CUresult {
    if (fake->ctx_depth != 1) return 201;
    fake->calls.push_back("register " + std::to_string(size));
    fake->register_flags = flags;
    fake->registered = p;
    return 0;
  };
  a.cuMemHostUnregister = [](void* p) -> CUresult {
    if (fake->ctx_depth != 1) return 201;
    // The memory must still be mapped: read it.
    fake->calls.push_back("unregister first=" + std::to_string(*static_cast<volatile uint8_t*>(p)));
    return p == fake->registered ? 0 : 1;
  };
  a.cuMemImportFromShareableHandle = [](CUmemGenericAllocationHandle* h, void* os,
                                        int type) -> CUresult {
    if (fake->ctx_depth != 1 || type != kMemHandleTypePosixFd) return 1;
    fake->imported_fd = static_cast<int>(reinterpret_cast<intptr_t>(os));
    fake->calls.push_back("import");
    *h = 77;
    return 0;
  };
  a.cuMemRelease = [](CUmemGenericAllocationHandle h) -> CUresult {
    fake->calls.push_back("mem_release " + std::to_string(h));
    return 0;
  };
  a.cuMemAddressReserve = [](CUdeviceptr* p, size_t size, size_t, CUdeviceptr,
                             unsigned long long) -> CUresult {
    fake->calls.push_back("reserve " + std::to_string(size));
    *p = kBase;
    return 0;
  };
  a.cuMemAddressFree = [](CUdeviceptr p, size_t) -> CUresult {
    fake->calls.push_back(p == kBase ? "free" : "free ?");
    return 0;
  };
  a.cuMemMap = [](CUdeviceptr p, size_t, size_t, CUmemGenericAllocationHandle h,
                  unsigned long long) -> CUresult {
    if (fake->fail_map != 0) return fake->fail_map;
    fake->calls.push_back(p == kBase && h == 77 ? "map" : "map ?");
    return 0;
  };
  a.cuMemUnmap = [](CUdeviceptr p, size_t) -> CUresult {
    fake->calls.push_back(p == kBase ? "unmap" : "unmap ?");
    return 0;
  };
  a.cuMemSetAccess = [](CUdeviceptr, size_t, const CUmemAccessDesc* d, size_t n) -> CUresult {
    if (n != 1 || d->location.type != kMemLocationTypeDevice ||
        d->flags != kMemAccessProtReadWrite) {
      return 1;
    }
    fake->calls.push_back("access device " + std::to_string(d->location.id));
    return 0;
  };
  a.cuMemcpyDtoH = [](void* dst, CUdeviceptr src, size_t n) -> CUresult {
    if (fake->ctx_depth != 1 || src < kBase || src - kBase + n > fake->device_bytes.size()) {
      return 1;
    }
    std::memcpy(dst, fake->device_bytes.data() + (src - kBase), n);
    return 0;
  };
  return a;
}

// Installs a FakeCuda for the scope of a test.
struct FakeDriver {
  FakeDriver() {
    fake = &state;
    driver = CudaDriver::FromApi(FakeApi(), "fake-libcuda");
  }
  ~FakeDriver() { fake = nullptr; }
  FakeCuda state;
  std::shared_ptr<const CudaDriver> driver;
};

TransportOptions WithDriver(std::shared_ptr<const CudaDriver> driver) {
  TransportOptions o;
  o.driver = [driver]() -> absl::StatusOr<std::shared_ptr<const CudaDriver>> { return driver; };
  return o;
}

TransportOptions WithoutDriver() {
  TransportOptions o;
  o.driver = []() -> absl::StatusOr<std::shared_ptr<const CudaDriver>> {
    return absl::FailedPreconditionError("the CUDA driver is not available: dlopen failed");
  };
  return o;
}

// --- tests -------------------------------------------------------------------

TEST_CASE("cpp client: gpu uuid: formatted as nvidia-smi, matched without case or prefix",
          "[cpp_client_transport]") {
  const unsigned char bytes[16] = {0x8c, 0x5b, 0x0c, 0x1e, 0x6f, 0x1d, 0x4c, 0x1e,
                                   0x9d, 0x2a, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  CHECK(FormatGpuUuid(bytes) == "GPU-8c5b0c1e-6f1d-4c1e-9d2a-0123456789ab");
  CHECK(NormalizeGpuUuid(" gpu-8C5B0C1E-6f1d ") == "8c5b0c1e-6f1d");
  CHECK(SameGpuUuid("GPU-8c5b0c1e-6f1d-4c1e-9d2a-0123456789ab",
                    "8C5B0C1E-6F1D-4C1E-9D2A-0123456789AB"));
  CHECK_FALSE(SameGpuUuid("GPU-8c5b0c1e", "GPU-8c5b0c1f"));
  CHECK_FALSE(SameGpuUuid("", "GPU-"));
}

TEST_CASE("cpp client: cuda errors: named, with the code that says whose fault",
          "[cpp_client_transport]") {
  absl::Status oom = CudaError("cuMemMap", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory");
  CHECK(oom.code() == absl::StatusCode::kResourceExhausted);
  CHECK(oom.message() == "cuMemMap: CUDA_ERROR_OUT_OF_MEMORY (code 2): out of memory");
  CHECK(CudaError("cuInit", 100).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(CudaError("cuInit", 34).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(CudaError("cuMemMap", 1).code() == absl::StatusCode::kInternal);
  CHECK(CudaError("cuInit", 100).message() == "cuInit: CUDA error (code 100)");
}

TEST_CASE("cpp client: cuda driver: a missing library is a clear FAILED_PRECONDITION",
          "[cpp_client_transport]") {
  absl::Status s = CudaDriver::Load("libcuda-conveyor-test-absent.so.1").status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("dlopen(libcuda-conveyor-test-absent.so.1) failed"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("NVIDIA driver"));
}

#ifdef CONVEYOR_CUDA_DRIVER_STUB
TEST_CASE("cpp client: cuda driver: the toolkit's stub resolves but has no GPU behind it",
          "[cpp_client_transport]") {
  absl::Status s = CudaDriver::Load(CONVEYOR_CUDA_DRIVER_STUB).status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  // Every function resolved (no "lacks"); cuInit itself refused.
  CHECK_THAT(std::string(s.message()), Catch::Contains("cuInit of"));
  CHECK_THAT(std::string(s.message()), !Catch::Contains("lacks"));
}
#endif

TEST_CASE("cpp client: cuda driver: devices are found by UUID, the others named when none matches",
          "[cpp_client_transport]") {
  FakeDriver f;
  CHECK(*f.driver->FindDevice("") == 0);
  CHECK(*f.driver->FindDevice("gpu-11223344-5566-7788-99AA-BBCCDDEEFF00") == 1);
  absl::Status none = f.driver->FindDevice("GPU-00000000-0000").status();
  CHECK(none.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(none.message()),
             Catch::Contains("GPU-8c5b0c1e-6f1d-4c1e-9d2a-0123456789ab, "
                             "GPU-11223344-5566-7788-99aa-bbccddeeff00"));
  f.state.devices = 0;
  CHECK_THAT(std::string(f.driver->FindDevice("").status().message()),
             Catch::Contains("no CUDA device"));
}

TEST_CASE("cpp client: shared memory transport: views in the region, bounds and sizes checked",
          "[cpp_client_transport]") {
  UniqueFd fd = PatternMemfd(8192);
  auto t = SharedMemoryTransport::FromFd(fd.get(), 8192, TransportOptions{});
  REQUIRE(t.ok());
  fd.Reset();  // the mapping keeps the memory
  CHECK_FALSE((*t)->pinned());
  v1::Batch b = BatchOf(1000, 24);
  absl::StatusOr<BatchBytes> v = (*t)->View(b, 24);
  REQUIRE(v.ok());
  CHECK(v->host[0] == 1000 % 251);
  CHECK(v->device == 0);
  std::vector<uint8_t> copy(24);
  REQUIRE((*t)->CopyToHost(*v, 24, copy.data()).ok());
  CHECK(copy[23] == 1023 % 251);
  v1::Batch outside = BatchOf(8180, 24);
  CHECK((*t)->View(outside, 24).status().code() == absl::StatusCode::kOutOfRange);
  v1::Batch wrong = BatchOf(0, 25);
  absl::Status s = (*t)->View(wrong, 24).status();
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains("images_bytes 25 does not match"));
}

TEST_CASE("cpp client: shared memory transport: pin_memory without a driver is a clear error",
          "[cpp_client_transport]") {
  UniqueFd fd = PatternMemfd(4096);
  TransportOptions o = WithoutDriver();
  o.pin_memory = true;
  absl::Status s = SharedMemoryTransport::FromFd(fd.get(), 4096, o).status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(s.message()), Catch::StartsWith("pin_memory: the CUDA driver"));
}

TEST_CASE(
    "cpp client: shared memory transport: pin_memory registers once, unregisters before unmapping",
    "[cpp_client_transport]") {
  FakeDriver f;
  UniqueFd fd = PatternMemfd(4096);
  TransportOptions o = WithDriver(f.driver);
  o.pin_memory = true;
  o.gpu_uuid = "GPU-11223344-5566-7788-99aa-bbccddeeff00";
  {
    auto t = SharedMemoryTransport::FromFd(fd.get(), 4096, o);
    REQUIRE(t.ok());
    CHECK((*t)->pinned());
    CHECK(f.state.ctx_depth == 0);  // the context was popped again
    CHECK(f.state.register_flags == (kMemHostRegisterPortable | kMemHostRegisterReadOnly));
    v1::Batch b = BatchOf(0, 4096);
    REQUIRE((*t)->View(b, 4096).ok());
    CHECK((*(*t)->View(b, 4096)).host == f.state.registered);
    CHECK(f.state.calls == std::vector<std::string>{"retain 1", "register 4096"});
  }
  // "unregister" read the mapping's first byte (0), so it came before munmap.
  CHECK(f.state.calls ==
        std::vector<std::string>{"retain 1", "register 4096", "unregister first=0", "release 1"});
  CHECK(f.state.ctx_depth == 0);
}

TEST_CASE("cpp client: shared memory transport: a GPU that cannot pin read-only memory is named",
          "[cpp_client_transport]") {
  FakeDriver f;
  f.state.read_only_supported = 0;
  UniqueFd fd = PatternMemfd(4096);
  TransportOptions o = WithDriver(f.driver);
  o.pin_memory = true;
  absl::Status s = SharedMemoryTransport::FromFd(fd.get(), 4096, o).status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(s.message()), Catch::Contains("cannot page-lock read-only memory"));
  CHECK(f.state.calls.empty());
}

TEST_CASE("cpp client: inline transport: the message's bytes move into the view",
          "[cpp_client_transport]") {
  InlineTransport t;
  v1::Batch b;
  b.set_images(std::string("abcdef"));
  absl::StatusOr<BatchBytes> v = t.View(b, 6);
  REQUIRE(v.ok());
  CHECK(std::string(reinterpret_cast<const char*>(v->host), 6) == "abcdef");
  CHECK(b.images().empty());
  CHECK(b.images_bytes() == 6);
  v1::Batch short_batch;
  short_batch.set_images(std::string("abc"));
  CHECK(t.View(short_batch, 6).status().code() == absl::StatusCode::kInternal);
}

TEST_CASE("cpp client: device memory transport: the host model's region is mapped and read",
          "[cpp_client_transport]") {
  UniqueFd fd = PatternMemfd(4 * 4096);
  v1::DeviceMemoryOpened opened;
  opened.set_host_model(true);
  opened.set_region_bytes(4 * 4096);
  opened.set_slot_bytes(4096);
  opened.set_num_slots(4);
  // No driver is needed (nor loaded) for the host model.
  auto t = DeviceMemoryTransport::FromFd(fd.get(), opened, WithoutDriver());
  REQUIRE(t.ok());
  CHECK((*t)->host_model());
  v1::Batch b = BatchOf(2 * 4096, 100, 2);
  absl::StatusOr<BatchBytes> v = (*t)->View(b, 100);
  REQUIRE(v.ok());
  CHECK(v->device == reinterpret_cast<uintptr_t>(v->host));
  CHECK(v->host[0] == (2 * 4096) % 251);
  v1::Batch outside = BatchOf(4 * 4096 - 10, 100);
  CHECK((*t)->View(outside, 100).status().code() == absl::StatusCode::kOutOfRange);
}

TEST_CASE("cpp client: device memory transport: without a driver a GPU region is a clear error",
          "[cpp_client_transport]") {
  UniqueFd fd = PatternMemfd(4096);
  v1::DeviceMemoryOpened opened;
  opened.set_region_bytes(4096);
  absl::Status s = DeviceMemoryTransport::FromFd(fd.get(), opened, WithoutDriver()).status();
  CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(s.message()), Catch::StartsWith("DEVICE_MEMORY: the CUDA driver"));
}

TEST_CASE("cpp client: device memory transport: imported on the named GPU, torn down in reverse",
          "[cpp_client_transport]") {
  FakeDriver f;
  f.state.device_bytes.resize(3 * 4096);
  for (size_t i = 0; i < f.state.device_bytes.size(); ++i) f.state.device_bytes[i] = i % 7;
  UniqueFd fd = PatternMemfd(16);
  v1::DeviceMemoryOpened opened;
  opened.set_region_bytes(3 * 4096);
  opened.set_gpu_uuid("GPU-11223344-5566-7788-99aa-bbccddeeff00");
  {
    auto t = DeviceMemoryTransport::FromFd(fd.get(), opened, WithDriver(f.driver));
    REQUIRE(t.ok());
    CHECK(f.state.imported_fd == fd.get());
    CHECK(f.state.ctx_depth == 0);
    CHECK(f.state.calls == std::vector<std::string>{"retain 1", "import", "reserve 12288", "map",
                                                    "access device 1"});
    v1::Batch b = BatchOf(4096, 10, 1);
    absl::StatusOr<BatchBytes> v = (*t)->View(b, 10);
    REQUIRE(v.ok());
    CHECK(v->host == nullptr);
    CHECK(v->device == kBase + 4096);
    std::vector<uint8_t> copy(10);
    REQUIRE((*t)->CopyToHost(*v, 10, copy.data()).ok());
    CHECK(copy[0] == 4096 % 7);
    CHECK(copy[9] == (4096 + 9) % 7);
    v1::Batch outside = BatchOf(3 * 4096 - 5, 10);
    CHECK((*t)->View(outside, 10).status().code() == absl::StatusCode::kOutOfRange);
  }
  CHECK(std::vector<std::string>(f.state.calls.begin() + 5, f.state.calls.end()) ==
        std::vector<std::string>{"unmap", "free", "mem_release 77", "release 1"});
  CHECK(f.state.ctx_depth == 0);
}

TEST_CASE("cpp client: device mapping: a failed map undoes the import and the reservation",
          "[cpp_client_transport]") {
  FakeDriver f;
  f.state.fail_map = 2;
  absl::Status s = DeviceMapping::Import(f.driver, "", 5, 4096).status();
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("cuMemMap of the 4096-byte device region: CUDA_ERROR_OUT_OF_MEMORY"));
  CHECK(f.state.calls == std::vector<std::string>{"retain 0", "import", "reserve 4096", "free",
                                                  "mem_release 77", "release 0"});
  CHECK(f.state.ctx_depth == 0);
  CHECK(DeviceMapping::Import(f.driver, "GPU-nope", 5, 4096).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("cpp client: open transport: details must fit, pin_memory needs shared memory",
          "[cpp_client_transport]") {
  v1::StreamOpened op;
  op.set_transport(v1::SHARED_MEMORY);
  op.mutable_data_socket()->set_data_port(1);
  absl::Status s = OpenClientTransport(op, TransportOptions{}).status();
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains("SHARED_MEMORY"));

  v1::StreamOpened inline_op;
  inline_op.set_transport(v1::INLINE);
  auto t = OpenClientTransport(inline_op, TransportOptions{});
  REQUIRE(t.ok());
  CHECK((*t)->kind() == v1::INLINE);
  TransportOptions pin;
  pin.pin_memory = true;
  absl::Status p = OpenClientTransport(inline_op, pin).status();
  CHECK(p.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(p.message()), Catch::Contains("pin_memory needs a SHARED_MEMORY stream"));

  v1::StreamOpened ds;
  ds.set_transport(v1::DATA_SOCKET);
  ds.mutable_data_socket()->set_data_port(1);
  CHECK_THAT(std::string(OpenClientTransport(ds, TransportOptions{}).status().message()),
             Catch::Contains("DATA_SOCKET on a unix socket"));
}

}  // namespace
}  // namespace conveyor::client

#endif  // CONVEYOR_HAVE_CLIENT
