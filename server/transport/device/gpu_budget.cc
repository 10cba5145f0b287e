#include "server/transport/device/gpu_budget.h"

#include "absl/strings/str_format.h"

namespace conveyor::server {

std::string FormatDeviceBytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.1f GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return absl::StrFormat("%.1f KiB", b / double(1ull << 10));
  return absl::StrFormat("%d B", b);
}

std::shared_ptr<GpuBudget> GpuBudget::Create(uint64_t bytes_per_gpu) {
  return std::shared_ptr<GpuBudget>(new GpuBudget(bytes_per_gpu));
}

GpuBudget::Reservation::~Reservation() { budget_->Give(uuid_, bytes_); }

uint64_t GpuBudget::LimitOf(const gpu::DeviceInfo& device) const {
  return bytes_per_gpu_ != 0 ? bytes_per_gpu_ : device.total_bytes / 4;
}

absl::StatusOr<std::unique_ptr<GpuBudget::Reservation>> GpuBudget::Reserve(
    const gpu::DeviceInfo& device, uint64_t bytes) {
  const uint64_t limit = LimitOf(device);
  {
    MutexLock lock(&mu_);
    auto it = in_use_.find(device.uuid);
    const Use use = it == in_use_.end() ? Use{} : it->second;
    if (bytes > limit || use.bytes > limit - bytes) {
      const uint64_t free_bytes = limit > use.bytes ? limit - use.bytes : 0;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "GPU %s (%s): the stream needs %s of device memory but only %s of the GPU's %s "
          "gpu_memory_budget is free (%d stream(s) hold %s); lower credits or batch_size, retry "
          "later, or raise gpu_memory_budget",
          device.uuid, device.name, FormatDeviceBytes(bytes), FormatDeviceBytes(free_bytes),
          FormatDeviceBytes(limit), use.holders, FormatDeviceBytes(use.bytes)));
    }
    Use& held = in_use_[device.uuid];
    held.bytes += bytes;
    ++held.holders;
  }
  return std::unique_ptr<Reservation>(new Reservation(shared_from_this(), device.uuid, bytes));
}

void GpuBudget::Give(const std::string& uuid, uint64_t bytes) {
  MutexLock lock(&mu_);
  auto it = in_use_.find(uuid);
  if (it == in_use_.end()) return;
  it->second.bytes -= bytes;
  if (--it->second.holders == 0) in_use_.erase(it);
}

uint64_t GpuBudget::InUse(const std::string& uuid) const {
  MutexLock lock(&mu_);
  auto it = in_use_.find(uuid);
  return it == in_use_.end() ? 0 : it->second.bytes;
}

int GpuBudget::Holders(const std::string& uuid) const {
  MutexLock lock(&mu_);
  auto it = in_use_.find(uuid);
  return it == in_use_.end() ? 0 : it->second.holders;
}

}  // namespace conveyor::server
