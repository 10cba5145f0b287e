#include "server/transport/device/device_finisher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace conveyor::server {

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

absl::Status Prefixed(const absl::Status& st, const std::string& what) {
  return absl::Status(st.code(), absl::StrCat(what, ": ", st.message()));
}

}  // namespace

// The finishes whose `done` has not returned yet: Drain waits for none.
// Shared with the completions, which may run after the finisher is gone.
class DeviceFinisher::InFlight {
 public:
  void Add() {
    MutexLock lock(&mu_);
    ++n_;
  }
  void Done() {
    MutexLock lock(&mu_);
    if (--n_ == 0) cv_.SignalAll();
  }
  void WaitIdle() {
    MutexLock lock(&mu_);
    while (n_ != 0) cv_.Wait(&mu_);
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};

DeviceFinisher::DeviceFinisher(std::shared_ptr<gpu::DeviceApi> api, gpu::DeviceInfo device,
                               std::shared_ptr<GpuBudget> budget, TransformSpec transform)
    : api_(std::move(api)),
      device_(std::move(device)),
      budget_(std::move(budget)),
      transform_(std::move(transform)),
      in_flight_(std::make_shared<InFlight>()) {}

DeviceFinisher::~DeviceFinisher() { Drain(); }

absl::Status DeviceFinisher::Attach(SlotArena& arena, const BatchLayout& layout) {
  const std::string gpu = absl::StrFormat("GPU %s (%s)", device_.uuid, device_.name);
  if (layout.batch_size == 0 || layout.sample_bytes == 0 || arena.num_slots() == 0) {
    return absl::InvalidArgumentError("a device stream needs slots and samples of some bytes");
  }
  device_sample_bytes_ = SampleBytes(transform_);
  host_sample_bytes_ = layout.sample_bytes;
  if (host_sample_bytes_ == device_sample_bytes_) {
    converts_ = false;  // uint8 pipelines, audio (float32 already)
  } else if (transform_.dtype != DType::kUint8 &&
             host_sample_bytes_ * ElementSize(transform_.dtype) == device_sample_bytes_) {
    converts_ = true;  // uint8 host samples of a float pipeline (collate_uint8)
  } else {
    return absl::InternalError(absl::StrFormat(
        "pipeline samples of %d bytes on the host cannot become %s samples of %d bytes",
        host_sample_bytes_, ToString(transform_.dtype), device_sample_bytes_));
  }
  if (converts_) {
    convert_.dtype = transform_.dtype == DType::kFloat16 ? gpu::DeviceDType::kFloat16
                                                         : gpu::DeviceDType::kFloat32;
    convert_.channels = 3;
    convert_.plane = static_cast<uint64_t>(transform_.output_height) *
                     static_cast<uint64_t>(transform_.output_width);
    convert_.channels_last = transform_.layout == Layout::kNHWC;
    convert_.mean = transform_.mean;
    convert_.std = transform_.std;
  }
  num_slots_ = static_cast<uint32_t>(arena.num_slots());
  ring_slot_bytes_ = RoundUp(uint64_t{layout.batch_size} * device_sample_bytes_, kRingAlignment);
  const uint64_t ring_request = ring_slot_bytes_ * num_slots_;
  const uint64_t staging_request =
      converts_ ? RoundUp(uint64_t{layout.batch_size} * host_sample_bytes_, kRingAlignment) : 0;
  reserved_bytes_ = RoundUp(ring_request, kReserveGranularity) +
                    RoundUp(staging_request, kReserveGranularity);

  // The budget first: a stream that does not fit touches nothing.
  absl::StatusOr<std::unique_ptr<GpuBudget::Reservation>> reservation =
      budget_->Reserve(device_, reserved_bytes_);
  if (!reservation.ok()) return reservation.status();
  absl::StatusOr<std::unique_ptr<gpu::HostRegistration>> registration =
      api_->RegisterHost(arena.slot(0), arena.total_bytes());
  if (!registration.ok()) {
    return Prefixed(registration.status(),
                    absl::StrCat("page-locking the stream's ", FormatDeviceBytes(arena.total_bytes()),
                                 " of host slots for ", gpu));
  }
  absl::StatusOr<std::unique_ptr<gpu::DeviceAllocation>> ring = api_->Allocate(device_, ring_request);
  if (!ring.ok()) {
    return Prefixed(ring.status(),
                    absl::StrFormat("allocating the stream's ring of %d x %s on %s", num_slots_,
                                    FormatDeviceBytes(ring_slot_bytes_), gpu));
  }
  std::unique_ptr<gpu::DeviceAllocation> staging;
  if (converts_) {
    absl::StatusOr<std::unique_ptr<gpu::DeviceAllocation>> s =
        api_->Allocate(device_, staging_request);
    if (!s.ok()) {
      return Prefixed(s.status(), absl::StrCat("allocating the stream's staging buffer of ",
                                               FormatDeviceBytes(staging_request), " on ", gpu));
    }
    staging = *std::move(s);
  }
  absl::StatusOr<std::unique_ptr<gpu::DeviceQueue>> queue = api_->CreateQueue(device_);
  if (!queue.ok()) return Prefixed(queue.status(), absl::StrCat("creating a queue on ", gpu));

  host_base_ = arena.slot(0);
  host_slot_bytes_ = arena.slot_bytes();
  host_images_offset_ = layout.images_offset;
  ring_bytes_ = (*ring)->bytes();
  ring_address_ = (*ring)->device_address();
  staging_address_ = staging != nullptr ? staging->device_address() : 0;
  MutexLock lock(&mu_);
  reservation_ = *std::move(reservation);
  registration_ = *std::move(registration);
  ring_ = *std::move(ring);
  staging_ = std::move(staging);
  queue_ = *std::move(queue);
  return absl::OkStatus();
}

void DeviceFinisher::Finish(const BatchInfo& batch,
                            absl::AnyInvocable<void(absl::Status) &&> done) {
  // Held by the completion, and called here when none could be queued.
  auto holder = std::make_shared<absl::AnyInvocable<void(absl::Status) &&>>(std::move(done));
  absl::Status refused;
  {
    MutexLock lock(&mu_);
    if (drained_ || queue_ == nullptr) {
      refused = absl::FailedPreconditionError("the stream's device memory is gone");
    } else if (batch.slot >= num_slots_) {
      refused = absl::InternalError(
          absl::StrFormat("slot %d is not one of the stream's %d", batch.slot, num_slots_));
    } else {
      const uint8_t* host = host_base_ + batch.slot * host_slot_bytes_ + host_images_offset_;
      const uint64_t bytes = uint64_t{batch.num_samples} * host_sample_bytes_;
      const uint64_t dst = ring_address_ + batch.slot * ring_slot_bytes_;
      // An error of queueing is reported by the completion after what was
      // queued (or here, when not even the completion can be queued).
      absl::Status queued;
      if (bytes > 0 && converts_) {
        gpu::ConvertSpec spec = convert_;
        spec.elements = bytes;
        queued = queue_->CopyToDevice(staging_address_, host, bytes);
        if (queued.ok()) queued = queue_->Convert(dst, staging_address_, spec);
      } else if (bytes > 0) {
        queued = queue_->CopyToDevice(dst, host, bytes);
      }
      in_flight_->Add();
      absl::Status accepted = queue_->OnComplete(
          [holder, queued, in_flight = in_flight_](absl::Status st) mutable {
            {
              // Called and destroyed before Drain may return.
              absl::AnyInvocable<void(absl::Status) &&> d = std::move(*holder);
              std::move(d)(queued.ok() ? std::move(st) : queued);
            }
            in_flight->Done();
          });
      if (!accepted.ok()) {
        in_flight_->Done();
        refused = queued.ok() ? accepted : queued;
      }
    }
  }
  // Outside the lock: `done` may start the engine's next work.
  if (!refused.ok()) std::move (*holder)(std::move(refused));
}

void DeviceFinisher::Drain() {
  std::unique_ptr<gpu::DeviceQueue> queue;
  {
    MutexLock lock(&mu_);
    drained_ = true;
    queue = std::move(queue_);
  }
  // Destroying the queue runs what is queued and every completion.
  queue.reset();
  in_flight_->WaitIdle();
  ReleaseDevice();
}

void DeviceFinisher::ReleaseDevice() {
  std::unique_ptr<gpu::DeviceAllocation> staging, ring;
  std::unique_ptr<gpu::HostRegistration> registration;
  std::unique_ptr<GpuBudget::Reservation> reservation;
  {
    MutexLock lock(&mu_);
    staging = std::move(staging_);
    ring = std::move(ring_);
    registration = std::move(registration_);
    reservation = std::move(reservation_);
  }
  // In this order, outside the lock (a device free may take a while).
  staging.reset();
  ring.reset();
  registration.reset();
  reservation.reset();
}

absl::StatusOr<UniqueFd> DeviceFinisher::ExportRingFd() const {
  MutexLock lock(&mu_);
  if (ring_ == nullptr) {
    return absl::FailedPreconditionError("the stream's device memory is gone");
  }
  return ring_->ExportFd();
}

}  // namespace conveyor::server
