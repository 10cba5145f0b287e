// DeviceApi: the few GPU operations the daemon needs to land batches in GPU
// memory (find a GPU by UUID, allocate memory another process can map, page-
// lock host memory, queue copies and the uint8 → float conversion, learn when
// they are done), behind one interface so that the device path's logic (ring
// reuse, release only after the copy completed, budgets, UUID lookup,
// shutdown with work in flight) runs and is tested on machines without a GPU.
//
//   CUDA        core/gpu/cuda_device_api.cc: the CUDA runtime linked
//               statically (it loads the driver at run time) and the
//               driver's virtual memory API for POSIX-fd shareable memory.
//   host model  core/gpu/host_device_api.h: "device" memory is a memfd,
//               queued copies and conversions run later on a thread of the
//               model, completions are reported after them.
//   none        what MakeDeviceApi() gives in a build without CUDA: every
//               device lookup fails with FAILED_PRECONDITION saying so.
//
// Device memory is addressed by a 64-bit device address (CUdeviceptr); the
// host model's addresses are offsets into its memfds, never dereferenced by
// callers.
//
// Thread-safety: DeviceApi methods may be called from any thread. A
// DeviceQueue and a DeviceAllocation are used by one owner at a time;
// completion callbacks run on a thread of the implementation (never inline
// in the call that queued them) and must not block.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"
#include "core/gpu/device_dtype.h"

namespace conveyor::gpu {

struct DeviceInfo {
  std::string uuid;  // "GPU-8c5b0c1e-6f1d-…", as `nvidia-smi -L` prints it
  int ordinal = 0;   // this process's device number (CUDA_VISIBLE_DEVICES applies)
  std::string name;  // "NVIDIA H200"
  uint64_t total_bytes = 0;
};

// Device memory that another process can map: exported as a POSIX fd (the
// importer calls cuMemImportFromShareableHandle, cuMemMap, cuMemSetAccess).
// Destroying it unmaps and drops this process's handle; the memory itself is
// freed once every importer has dropped its own too.
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  virtual uint64_t device_address() const = 0;
  // At least what was asked, rounded up to the allocation granularity.
  virtual uint64_t bytes() const = 0;
  // A new fd for the allocation, owned by the caller.
  virtual absl::StatusOr<UniqueFd> ExportFd() const = 0;
};

// Host memory page-locked for the device's DMA engines (cudaHostRegister);
// destroying it unregisters the range.
class HostRegistration {
 public:
  virtual ~HostRegistration() = default;
};

// DeviceDType (uint8, float32, float16, bfloat16): core/gpu/device_dtype.h.

// The conversion of a batch of uint8 samples to `dtype`, element for
// element in the same layout: out = (in / 255 - mean[c]) / std[c] in float32
// (the daemon's host formula, core/decode/sample_transformer.cc), then
// rounded to `dtype` (nearest even). `channels_last` says whether the
// channel is the fastest-varying index (NHWC) or the plane index (NCHW:
// channel = element / plane % channels).
struct ConvertSpec {
  DeviceDType dtype = DeviceDType::kFloat32;
  uint64_t elements = 0;  // uint8 values in, values of `dtype` out
  uint32_t channels = 3;
  uint64_t plane = 1;  // height × width (NCHW only)
  bool channels_last = false;
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
};

// An ordered queue of device work (a CUDA stream): each operation starts
// after the one queued before it has finished.
class DeviceQueue {
 public:
  // Waits for the work queued, then releases the queue.
  virtual ~DeviceQueue() = default;

  // Queues a copy of `bytes` from `host` (inside a HostRegistration) to
  // device address `device`. The host bytes must stay unchanged until a
  // completion queued after it has run.
  virtual absl::Status CopyToDevice(uint64_t device, const void* host, uint64_t bytes) = 0;

  // Queues the conversion of spec.elements uint8 values at device address
  // `src` into values of spec.dtype at device address `dst`.
  virtual absl::Status Convert(uint64_t dst, uint64_t src, const ConvertSpec& spec) = 0;

  // Queues a completion: `done` runs once everything queued before it has
  // finished (OK) or failed (the device's error), on a thread of the
  // implementation. Every accepted completion runs exactly once, also when
  // the queue is destroyed first.
  virtual absl::Status OnComplete(absl::AnyInvocable<void(absl::Status) &&> done) = 0;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // "cuda", "host model" or "none", for logs.
  virtual std::string name() const = 0;

  // The devices this process sees; FAILED_PRECONDITION saying why there are
  // none (no driver, no device, built without CUDA).
  virtual absl::StatusOr<std::vector<DeviceInfo>> Devices() = 0;

  // The device whose UUID is `uuid` (case-insensitive, with or without the
  // "GPU-" prefix): FAILED_PRECONDITION naming the UUIDs there are when
  // none matches, or why there are no devices.
  absl::StatusOr<DeviceInfo> Find(std::string_view uuid);

  virtual absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(const DeviceInfo& device,
                                                                     uint64_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<HostRegistration>> RegisterHost(void* host,
                                                                         uint64_t bytes) = 0;
  virtual absl::StatusOr<std::unique_ptr<DeviceQueue>> CreateQueue(const DeviceInfo& device) = 0;
};

// The CUDA implementation in a build with CUDA, else "none".
std::unique_ptr<DeviceApi> MakeDeviceApi();

}  // namespace conveyor::gpu
