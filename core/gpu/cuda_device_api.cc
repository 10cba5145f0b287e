#include "core/gpu/cuda_device_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <deque>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/mutex.h"
#include "core/base/status_macros.h"
#include "core/gpu/convert_kernel.h"
#include "core/gpu/convert_spec.h"
#include "core/gpu/cuda_driver.h"
#include "core/gpu/cuda_error.h"
#include "core/gpu/cuda_handles.h"

namespace conveyor::gpu {
namespace {

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
std::string FormatUuid(const cudaUUID_t& uuid) {
  const unsigned char* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += absl::StrFormat("%02x", b[i]);
  }
  return s;
}

absl::Status UseDevice(int ordinal) {
  return CudaError(absl::StrCat("cudaSetDevice(", ordinal, ")"), cudaSetDevice(ordinal));
}

class CudaAllocation final : public DeviceAllocation {
 public:
  CudaAllocation(UniqueCuMemHandle handle, UniqueCuReservation reservation, UniqueCuMapping mapping)
      : handle_(std::move(handle)),
        reservation_(std::move(reservation)),
        mapping_(std::move(mapping)) {}

  uint64_t device_address() const override { return mapping_.get().ptr; }
  uint64_t bytes() const override { return mapping_.get().size; }

  absl::StatusOr<UniqueFd> ExportFd() const override {
    ASSIGN_OR_RETURN(const CudaDriver* d, GetCudaDriver());
    int fd = -1;
    RETURN_IF_ERROR(
        CudaError("cuMemExportToShareableHandle",
                  d->cuMemExportToShareableHandle(&fd, handle_.get(),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
    return UniqueFd(fd);
  }

 private:
  // Released in reverse: unmapped, then the range freed, then the handle.
  UniqueCuMemHandle handle_;
  UniqueCuReservation reservation_;
  UniqueCuMapping mapping_;
};

class CudaRegistration final : public HostRegistration {
 public:
  explicit CudaRegistration(UniqueCudaHostRegistration r) : r_(std::move(r)) {}

 private:
  UniqueCudaHostRegistration r_;
};

// Completions: OnComplete records an event on the stream and hands it to
// the queue's completion thread, which waits for the events in order
// (cudaEventSynchronize, blocking-sync events: no spinning) and runs each
// `done`. Not cudaLaunchHostFunc: its callbacks run on CUDA's own thread,
// must not call CUDA (the daemon's release path may queue the next copy)
// and hold up the stream while they run.
class CudaQueue final : public DeviceQueue {
 public:
  CudaQueue(DeviceInfo device, UniqueCudaStream stream)
      : device_(std::move(device)), stream_(std::move(stream)), waiter_([this] { Wait(); }) {}

  ~CudaQueue() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      cv_.SignalAll();
    }
    waiter_.join();  // every accepted completion has run
    (void)UseDevice(device_.ordinal);
    (void)cudaStreamSynchronize(stream_.get());
  }

  absl::Status CopyToDevice(uint64_t device, const void* host, uint64_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    RETURN_IF_ERROR(UseDevice(device_.ordinal));
    return CudaError(absl::StrFormat("cudaMemcpyAsync of %u bytes to %s", bytes, device_.uuid),
                     cudaMemcpyAsync(reinterpret_cast<void*>(device), host, bytes,
                                     cudaMemcpyHostToDevice, stream_.get()));
  }

  absl::Status Convert(uint64_t dst, uint64_t src, const ConvertSpec& spec) override {
    RETURN_IF_ERROR(ValidateConvertSpec(spec));
    if (spec.elements == 0) return absl::OkStatus();
    RETURN_IF_ERROR(UseDevice(device_.ordinal));
    const int err = LaunchConvertKernel(stream_.get(), dst, src, spec.dtype, ParamsOf(spec));
    return CudaError(
        absl::StrCat("convert kernel (", DeviceDTypeName(spec.dtype), ") on ", device_.uuid),
        static_cast<cudaError_t>(err));
  }

  absl::Status OnComplete(absl::AnyInvocable<void(absl::Status) &&> done) override {
    if (!done) return absl::InvalidArgumentError("gpu: empty completion");
    RETURN_IF_ERROR(UseDevice(device_.ordinal));
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(
        CudaError("cudaEventCreateWithFlags",
                  cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync)));
    UniqueCudaEvent event(e);
    RETURN_IF_ERROR(CudaError("cudaEventRecord", cudaEventRecord(event.get(), stream_.get())));
    MutexLock lock(&mu_);
    pending_.push_back(Pending{std::move(event), std::move(done)});
    cv_.Signal();
    return absl::OkStatus();
  }

 private:
  struct Pending {
    UniqueCudaEvent event;
    absl::AnyInvocable<void(absl::Status) &&> done;
  };

  void Wait() {
    (void)UseDevice(device_.ordinal);
    for (;;) {
      Pending p;
      {
        MutexLock lock(&mu_);
        while (pending_.empty() && !stopping_) cv_.Wait(&mu_);
        if (pending_.empty()) return;
        p = std::move(pending_.front());
        pending_.pop_front();
      }
      absl::Status s = CudaError(absl::StrCat("work queued on ", device_.uuid),
                                 cudaEventSynchronize(p.event.get()));
      p.event.Reset();
      std::move(p.done)(std::move(s));
    }
  }

  const DeviceInfo device_;
  UniqueCudaStream stream_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread waiter_;  // last: starts once the rest is built
};

class CudaDeviceApi final : public DeviceApi {
 public:
  std::string name() const override { return "cuda"; }

  absl::StatusOr<std::vector<DeviceInfo>> Devices() override {
    MutexLock lock(&mu_);
    if (!devices_.has_value()) devices_ = List();
    return *devices_;
  }

  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(const DeviceInfo& device,
                                                             uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("gpu: allocation of 0 bytes");
    ASSIGN_OR_RETURN(const CudaDriver* d, GetCudaDriver());
    RETURN_IF_ERROR(UseDevice(device.ordinal));
    CUdevice dev = 0;
    RETURN_IF_ERROR(CudaError("cuDeviceGet", d->cuDeviceGet(&dev, device.ordinal)));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t granularity = 0;
    RETURN_IF_ERROR(CudaError(
        "cuMemGetAllocationGranularity",
        d->cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)));
    if (granularity == 0) granularity = 2u << 20;
    if (bytes > UINT64_MAX - granularity) {
      return absl::ResourceExhaustedError(
          absl::StrCat("GPU ", device.uuid, ": cannot allocate ", bytes, " bytes"));
    }
    const size_t size = (bytes + granularity - 1) / granularity * granularity;
    const std::string where =
        absl::StrCat(" of ", size, " bytes on GPU ", device.uuid, " (", device.name, ")");

    CUmemGenericAllocationHandle h = 0;
    RETURN_IF_ERROR(
        CudaError(absl::StrCat("cuMemCreate", where), d->cuMemCreate(&h, size, &prop, 0)));
    UniqueCuMemHandle handle(h);
    CUdeviceptr ptr = 0;
    RETURN_IF_ERROR(CudaError(absl::StrCat("cuMemAddressReserve", where),
                              d->cuMemAddressReserve(&ptr, size, granularity, 0, 0)));
    UniqueCuReservation reservation(CuRange{ptr, size});
    RETURN_IF_ERROR(CudaError(absl::StrCat("cuMemMap", where), d->cuMemMap(ptr, size, 0, h, 0)));
    UniqueCuMapping mapping(CuRange{ptr, size});
    CUmemAccessDesc access = {};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    RETURN_IF_ERROR(
        CudaError(absl::StrCat("cuMemSetAccess", where), d->cuMemSetAccess(ptr, size, &access, 1)));
    return std::unique_ptr<DeviceAllocation>(
        new CudaAllocation(std::move(handle), std::move(reservation), std::move(mapping)));
  }

  absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* host,
                                                                 uint64_t bytes) override {
    if (host == nullptr || bytes == 0) {
      return absl::InvalidArgumentError("gpu: RegisterHost of an empty range");
    }
    RETURN_IF_ERROR(CudaError(absl::StrFormat("cudaHostRegister of %u bytes", bytes),
                              cudaHostRegister(host, bytes, cudaHostRegisterPortable)));
    return std::unique_ptr<HostRegistration>(
        new CudaRegistration(UniqueCudaHostRegistration(host)));
  }

  absl::StatusOr<std::unique_ptr<DeviceQueue>> CreateQueue(const DeviceInfo& device) override {
    RETURN_IF_ERROR(UseDevice(device.ordinal));
    cudaStream_t s = nullptr;
    RETURN_IF_ERROR(CudaError("cudaStreamCreateWithFlags",
                              cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)));
    return std::unique_ptr<DeviceQueue>(new CudaQueue(device, UniqueCudaStream(s)));
  }

 private:
  static absl::StatusOr<std::vector<DeviceInfo>> List() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorNoDevice || (err == cudaSuccess && n == 0)) {
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA device: ", CudaError("cudaGetDeviceCount", err).message()));
    }
    if (err != cudaSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("no CUDA driver: ", CudaError("cudaGetDeviceCount", err).message()));
    }
    std::vector<DeviceInfo> devices;
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp prop = {};
      RETURN_IF_ERROR(CudaError(absl::StrCat("cudaGetDeviceProperties(", i, ")"),
                                cudaGetDeviceProperties(&prop, i)));
      devices.push_back(DeviceInfo{FormatUuid(prop.uuid), i, prop.name, prop.totalGlobalMem});
    }
    return devices;
  }

  Mutex mu_;
  std::optional<absl::StatusOr<std::vector<DeviceInfo>>> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<DeviceApi> NewCudaDeviceApi() { return std::make_unique<CudaDeviceApi>(); }

}  // namespace conveyor::gpu
