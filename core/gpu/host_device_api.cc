#include "core/gpu/host_device_api.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/mutex.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/base/unique_fd.h"
#include "core/gpu/convert_spec.h"

namespace conveyor::gpu {
namespace {

constexpr int kIdShift = 40;
constexpr uint64_t kOffsetMask = (uint64_t{1} << kIdShift) - 1;

// One allocation's memfd and its mapping here; unmapped when the last user
// (the allocation, or an operation running on it) lets go.
struct Region {
  UniqueFd fd;
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  std::string uuid;  // the device it is on
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() {
    if (base != nullptr) ::munmap(base, bytes);
  }
};

std::string Range(uint64_t address, uint64_t bytes) {
  return absl::StrFormat("[0x%x, +%u)", address, bytes);
}

}  // namespace

struct HostDeviceApi::State {
  std::vector<DeviceInfo> devices;
  Options options;

  mutable Mutex mu;
  CondVar unheld;  // signalled when Hold(false) or a queue stops
  bool held ABSL_GUARDED_BY(mu) = false;
  uint64_t next_id ABSL_GUARDED_BY(mu) = 1;
  std::map<uint64_t, std::shared_ptr<Region>> regions ABSL_GUARDED_BY(mu);  // by allocation id
  std::map<std::string, uint64_t> in_use ABSL_GUARDED_BY(mu);               // bytes by UUID
  std::map<uintptr_t, uintptr_t> registered ABSL_GUARDED_BY(mu);            // start -> end
  std::optional<absl::Status> fail_next ABSL_GUARDED_BY(mu);
  uint64_t ops_run ABSL_GUARDED_BY(mu) = 0;

  const DeviceInfo* Known(const std::string& uuid) const {
    for (const DeviceInfo& d : devices) {
      if (d.uuid == uuid) return &d;
    }
    return nullptr;
  }

  // The region holding device range [address, address + bytes) and the
  // host pointer to its first byte.
  absl::StatusOr<std::pair<std::shared_ptr<Region>, uint8_t*>> Resolve(uint64_t address,
                                                                       uint64_t bytes) const {
    MutexLock lock(&mu);
    const auto it = regions.find(address >> kIdShift);
    const uint64_t offset = address & kOffsetMask;
    if (it == regions.end() || offset > it->second->bytes || bytes > it->second->bytes - offset) {
      return absl::OutOfRangeError(absl::StrCat("host model: device range ", Range(address, bytes),
                                                " is not inside a live allocation"));
    }
    return std::make_pair(it->second, it->second->base + offset);
  }

  bool Registered(const void* host, uint64_t bytes) const {
    const uintptr_t start = reinterpret_cast<uintptr_t>(host);
    MutexLock lock(&mu);
    auto it = registered.upper_bound(start);
    if (it == registered.begin()) return false;
    --it;
    return start >= it->first && bytes <= it->second - start;
  }
};

namespace {

using State = HostDeviceApi::State;

class HostAllocation final : public DeviceAllocation {
 public:
  HostAllocation(std::shared_ptr<State> state, uint64_t id, std::shared_ptr<Region> region)
      : state_(std::move(state)), id_(id), region_(std::move(region)) {}
  ~HostAllocation() override {
    MutexLock lock(&state_->mu);
    state_->regions.erase(id_);
    state_->in_use[region_->uuid] -= region_->bytes;
  }
  uint64_t device_address() const override { return id_ << kIdShift; }
  uint64_t bytes() const override { return region_->bytes; }
  absl::StatusOr<UniqueFd> ExportFd() const override {
    const int fd = ::fcntl(region_->fd.get(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return PosixError("host model: dup of the allocation's memfd", errno);
    return UniqueFd(fd);
  }

 private:
  const std::shared_ptr<State> state_;
  const uint64_t id_;
  const std::shared_ptr<Region> region_;
};

class HostRegistrationImpl final : public HostRegistration {
 public:
  HostRegistrationImpl(std::shared_ptr<State> state, uintptr_t start)
      : state_(std::move(state)), start_(start) {}
  ~HostRegistrationImpl() override {
    MutexLock lock(&state_->mu);
    state_->registered.erase(start_);
  }

 private:
  const std::shared_ptr<State> state_;
  const uintptr_t start_;
};

// One queued operation: work (a copy or a conversion) or a completion.
struct Op {
  absl::AnyInvocable<absl::Status()> work;         // set for work
  absl::AnyInvocable<void(absl::Status) &&> done;  // set for a completion
};

class HostQueue final : public DeviceQueue {
 public:
  HostQueue(std::shared_ptr<State> state, DeviceInfo device)
      : state_(std::move(state)), device_(std::move(device)), worker_([this] { Run(); }) {}

  ~HostQueue() override {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      stopping_flag_.store(true);
      cv_.SignalAll();
    }
    {
      MutexLock lock(&state_->mu);
      state_->unheld.SignalAll();
    }
    worker_.join();
  }

  absl::Status CopyToDevice(uint64_t device, const void* host, uint64_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (host == nullptr) return absl::InvalidArgumentError("host model: copy from a null pointer");
    ASSIGN_OR_RETURN(auto target, state_->Resolve(device, bytes));
    RETURN_IF_ERROR(OnThisDevice(*target.first));
    if (!state_->Registered(host, bytes)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "host model: host memory [%p, +%u) is not registered (RegisterHost): an asynchronous "
          "copy to the device needs page-locked memory",
          host, bytes));
    }
    std::shared_ptr<State> state = state_;
    Push(Op{[state, device, host, bytes]() -> absl::Status {
              if (!state->Registered(host, bytes)) {
                return absl::FailedPreconditionError(absl::StrFormat(
                    "host model: host memory [%p, +%u) was unregistered before its copy ran", host,
                    bytes));
              }
              ASSIGN_OR_RETURN(auto target, state->Resolve(device, bytes));
              std::memcpy(target.second, host, bytes);
              return absl::OkStatus();
            },
            nullptr});
    return absl::OkStatus();
  }

  absl::Status Convert(uint64_t dst, uint64_t src, const ConvertSpec& spec) override {
    RETURN_IF_ERROR(ValidateConvertSpec(spec));
    if (spec.elements == 0) return absl::OkStatus();
    const uint64_t out_bytes = spec.elements * DeviceDTypeBytes(spec.dtype);
    ASSIGN_OR_RETURN(auto in, state_->Resolve(src, spec.elements));
    ASSIGN_OR_RETURN(auto out, state_->Resolve(dst, out_bytes));
    RETURN_IF_ERROR(OnThisDevice(*in.first));
    RETURN_IF_ERROR(OnThisDevice(*out.first));
    if (in.first == out.first && in.second < out.second + out_bytes &&
        out.second < in.second + spec.elements) {
      return absl::InvalidArgumentError(absl::StrCat("host model: convert: source ",
                                                     Range(src, spec.elements), " and destination ",
                                                     Range(dst, out_bytes), " overlap"));
    }
    std::shared_ptr<State> state = state_;
    const ConvertParams params = ParamsOf(spec);
    const DeviceDType dtype = spec.dtype;
    Push(Op{[state, dst, src, params, dtype, out_bytes]() -> absl::Status {
              ASSIGN_OR_RETURN(auto in, state->Resolve(src, params.elements));
              ASSIGN_OR_RETURN(auto out, state->Resolve(dst, out_bytes));
              ConvertOnHost(out.second, in.second, dtype, params);
              return absl::OkStatus();
            },
            nullptr});
    return absl::OkStatus();
  }

  absl::Status OnComplete(absl::AnyInvocable<void(absl::Status) &&> done) override {
    if (!done) return absl::InvalidArgumentError("host model: empty completion");
    Push(Op{nullptr, std::move(done)});
    return absl::OkStatus();
  }

 private:
  absl::Status OnThisDevice(const Region& region) const {
    if (region.uuid == device_.uuid) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("host model: memory on ", region.uuid, " used on a queue of ", device_.uuid));
  }

  void Push(Op op) {
    MutexLock lock(&mu_);
    ops_.push_back(std::move(op));
    cv_.Signal();
  }

  void Run() {
    absl::Status error;  // the first failure since the last completion
    for (;;) {
      Op op;
      {
        MutexLock lock(&mu_);
        while (ops_.empty() && !stopping_) cv_.Wait(&mu_);
        if (ops_.empty()) return;
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      std::optional<absl::Status> injected;
      {
        MutexLock lock(&state_->mu);
        while (state_->held && !stopping_flag_.load()) state_->unheld.Wait(&state_->mu);
        if (op.work) {
          ++state_->ops_run;
          injected = std::exchange(state_->fail_next, std::nullopt);
        }
      }
      if (op.work) {
        if (state_->options.op_delay > absl::ZeroDuration()) {
          absl::SleepFor(state_->options.op_delay);
        }
        absl::Status s = injected.has_value() ? *injected : op.work();
        if (!s.ok() && error.ok()) error = std::move(s);
      } else {
        std::move(op.done)(std::exchange(error, absl::OkStatus()));
      }
    }
  }

  const std::shared_ptr<State> state_;
  const DeviceInfo device_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Op> ops_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stopping_flag_{false};  // stopping_, read under the state's mutex
  std::thread worker_;                      // last: starts once the rest is built
};

}  // namespace

HostDeviceApi::HostDeviceApi(std::vector<DeviceInfo> devices)
    : HostDeviceApi(std::move(devices), Options{}) {}

HostDeviceApi::HostDeviceApi(std::vector<DeviceInfo> devices, Options options)
    : state_(std::make_shared<State>()) {
  state_->devices = std::move(devices);
  state_->options = options;
}

HostDeviceApi::~HostDeviceApi() { Hold(false); }

absl::StatusOr<std::vector<DeviceInfo>> HostDeviceApi::Devices() {
  if (state_->devices.empty()) {
    return absl::FailedPreconditionError("host model: no GPUs configured");
  }
  return state_->devices;
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> HostDeviceApi::Allocate(const DeviceInfo& device,
                                                                          uint64_t bytes) {
  const DeviceInfo* known = state_->Known(device.uuid);
  if (known == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("host model: unknown GPU ", device.uuid));
  }
  if (bytes == 0) return absl::InvalidArgumentError("host model: allocation of 0 bytes");
  if (bytes > kOffsetMask - kGranularity) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU ", known->uuid, " (", known->name,
                                                     "): cannot allocate ", bytes, " bytes"));
  }
  const uint64_t rounded = (bytes + kGranularity - 1) / kGranularity * kGranularity;
  uint64_t id;
  {
    MutexLock lock(&state_->mu);
    const uint64_t used = state_->in_use[known->uuid];
    if (rounded > known->total_bytes || used > known->total_bytes - rounded) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "GPU ", known->uuid, " (", known->name, "): out of device memory: cannot allocate ",
          rounded, " bytes with ", used, " of ", known->total_bytes, " bytes in use (host model)"));
    }
    state_->in_use[known->uuid] = used + rounded;  // reserved; returned below on failure
    id = state_->next_id++;
  }
  auto region = std::make_shared<Region>();
  region->uuid = known->uuid;
  absl::Status status;
  region->fd.Reset(::memfd_create("conveyor-host-model-gpu", MFD_CLOEXEC));
  if (!region->fd) {
    status = PosixError("host model: memfd_create", errno);
  } else if (::ftruncate(region->fd.get(), static_cast<off_t>(rounded)) != 0) {
    status = PosixError("host model: ftruncate of the allocation's memfd", errno);
  } else {
    void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, region->fd.get(), 0);
    if (p == MAP_FAILED) {
      status = PosixError("host model: mmap of the allocation's memfd", errno);
    } else {
      region->base = static_cast<uint8_t*>(p);
      region->bytes = rounded;
    }
  }
  MutexLock lock(&state_->mu);
  if (!status.ok()) {
    state_->in_use[known->uuid] -= rounded;
    return status;
  }
  state_->regions.emplace(id, region);
  return std::unique_ptr<DeviceAllocation>(new HostAllocation(state_, id, std::move(region)));
}

absl::StatusOr<std::unique_ptr<HostRegistration>> HostDeviceApi::RegisterHost(void* host,
                                                                              uint64_t bytes) {
  if (host == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("host model: RegisterHost of an empty range");
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(host);
  if (bytes > UINTPTR_MAX - start) {
    return absl::InvalidArgumentError("host model: RegisterHost range wraps around");
  }
  const uintptr_t end = start + bytes;
  MutexLock lock(&state_->mu);
  // Like cudaHostRegister: no range may be registered twice.
  auto it = state_->registered.lower_bound(end);
  if (it != state_->registered.begin() && std::prev(it)->second > start) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "host model: host memory [%p, +%u) overlaps a range already registered", host, bytes));
  }
  state_->registered.emplace(start, end);
  return std::unique_ptr<HostRegistration>(new HostRegistrationImpl(state_, start));
}

absl::StatusOr<std::unique_ptr<DeviceQueue>> HostDeviceApi::CreateQueue(const DeviceInfo& device) {
  const DeviceInfo* known = state_->Known(device.uuid);
  if (known == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("host model: unknown GPU ", device.uuid));
  }
  return std::unique_ptr<DeviceQueue>(new HostQueue(state_, *known));
}

absl::StatusOr<std::vector<uint8_t>> HostDeviceApi::ReadDevice(uint64_t address,
                                                               uint64_t bytes) const {
  ASSIGN_OR_RETURN(auto at, state_->Resolve(address, bytes));
  return std::vector<uint8_t>(at.second, at.second + bytes);
}

absl::Status HostDeviceApi::WriteDevice(uint64_t address, const void* data, uint64_t bytes) {
  ASSIGN_OR_RETURN(auto at, state_->Resolve(address, bytes));
  if (bytes > 0) std::memcpy(at.second, data, bytes);
  return absl::OkStatus();
}

void HostDeviceApi::FailNextOp(absl::Status status) {
  MutexLock lock(&state_->mu);
  state_->fail_next = std::move(status);
}

void HostDeviceApi::Hold(bool held) {
  MutexLock lock(&state_->mu);
  state_->held = held;
  if (!held) state_->unheld.SignalAll();
}

int HostDeviceApi::allocations() const {
  MutexLock lock(&state_->mu);
  return static_cast<int>(state_->regions.size());
}

int HostDeviceApi::registrations() const {
  MutexLock lock(&state_->mu);
  return static_cast<int>(state_->registered.size());
}

uint64_t HostDeviceApi::bytes_in_use(const std::string& uuid) const {
  MutexLock lock(&state_->mu);
  const auto it = state_->in_use.find(uuid);
  return it == state_->in_use.end() ? 0 : it->second;
}

uint64_t HostDeviceApi::ops_run() const {
  MutexLock lock(&state_->mu);
  return state_->ops_run;
}

}  // namespace conveyor::gpu
