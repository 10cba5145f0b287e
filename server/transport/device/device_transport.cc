#include "server/transport/device/device_transport.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace conveyor::server {

namespace {

v1::DType DeviceProto(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return v1::UINT8;
    case DType::kFloat32: return v1::FLOAT32;
    case DType::kFloat16: return v1::FLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

// The request's GPU: FAILED_PRECONDITION naming why this host has none of
// that UUID.
absl::StatusOr<gpu::DeviceInfo> FindGpu(gpu::DeviceApi& api, const std::string& uuid) {
  absl::StatusOr<gpu::DeviceInfo> found = api.Find(uuid);
  if (!found.ok()) {
    return absl::Status(found.status().code(),
                        absl::StrCat("DEVICE_MEMORY cannot serve GPU ", uuid, " on this daemon (",
                                     api.name(), "): ", found.status().message()));
  }
  return found;
}

}  // namespace

class DeviceTransport::Stream final : public StreamTransport {
 public:
  Stream(DeviceTransport* owner, const std::shared_ptr<conveyor::Stream>& stream,
         std::shared_ptr<DeviceFinisher> finisher,
         const HandOverRegistry::Registration& registration)
      : owner_(owner),
        stream_id_(stream->id()),
        finisher_(std::move(finisher)),
        secret_(registration.secret),
        handed_over_(registration.handed_over) {}
  ~Stream() override { owner_->registry_.Unregister(stream_id_); }

  void DescribeIn(v1::StreamOpened* opened) const override {
    v1::DeviceMemoryOpened* d = opened->mutable_device_memory();
    d->set_secret(secret_.data(), secret_.size());
    d->set_fd_socket(owner_->fd_socket_path_);
    d->set_gpu_uuid(finisher_->device().uuid);
    d->set_region_bytes(finisher_->ring_bytes());
    d->set_slot_bytes(finisher_->ring_slot_bytes());
    d->set_num_slots(finisher_->num_slots());
    d->set_host_model(owner_->api_->name() == "host model");
  }

  // The images are in ring slot batch.slot, as the pipeline's dtype.
  void Deliver(const BatchInfo& batch, v1::Batch* message) override {
    message->set_images_offset(uint64_t{batch.slot} * finisher_->ring_slot_bytes());
    message->set_dtype(DeviceProto(finisher_->device_dtype()));
    message->set_images_bytes(uint64_t{batch.num_samples} * finisher_->device_sample_bytes());
  }

  bool MustWaitForClient(const absl::Status& end) const override {
    return ClientStillReads(end) && !handed_over_->load(std::memory_order_acquire);
  }

 private:
  DeviceTransport* const owner_;  // not owned; outlives this
  const uint64_t stream_id_;
  const std::shared_ptr<DeviceFinisher> finisher_;
  const Secret secret_;
  const std::shared_ptr<const std::atomic<bool>> handed_over_;
};

DeviceTransport::DeviceTransport(std::shared_ptr<gpu::DeviceApi> api,
                                 std::shared_ptr<GpuBudget> budget, std::string fd_socket_path)
    : api_(std::move(api)),
      budget_(std::move(budget)),
      fd_socket_path_(std::move(fd_socket_path)) {}

DeviceTransport::~DeviceTransport() = default;

absl::Status DeviceTransport::CanServe(const v1::OpenStream& request,
                                       const ClientIdentity& client) const {
  if (request.device().gpu_uuid().empty()) {
    return absl::InvalidArgumentError(
        "DEVICE_MEMORY needs OpenStream.device.gpu_uuid: the UUID of a GPU of the daemon's host "
        "(as `nvidia-smi -L` prints it, GPU-…)");
  }
  if (!client.is_unix()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DEVICE_MEMORY needs a connection over the daemon's unix socket (the device memory is "
        "handed over as an fd); this one is ",
        client.Describe()));
  }
  if (fd_socket_path_.empty()) {
    return absl::FailedPreconditionError("this daemon has no fd hand-over socket");
  }
  absl::StatusOr<gpu::DeviceInfo> found = FindGpu(*api_, request.device().gpu_uuid());
  return found.status();
}

absl::StatusOr<std::shared_ptr<BatchFinisher>> DeviceTransport::MakeFinisher(
    const v1::OpenStream& request, const PipelineConfig& pipeline) const {
  absl::StatusOr<gpu::DeviceInfo> found = FindGpu(*api_, request.device().gpu_uuid());
  if (!found.ok()) return found.status();
  return std::shared_ptr<BatchFinisher>(
      std::make_shared<DeviceFinisher>(api_, *std::move(found), budget_, pipeline.transform));
}

absl::StatusOr<std::unique_ptr<StreamTransport>> DeviceTransport::Open(
    const std::shared_ptr<conveyor::Stream>& stream, std::function<void()> wake) {
  auto finisher = std::dynamic_pointer_cast<DeviceFinisher>(stream->options().finisher);
  if (finisher == nullptr || finisher->ring_bytes() == 0) {
    return absl::InternalError(absl::StrFormat(
        "stream %d has no device ring: it was not opened with this transport's finisher",
        stream->id()));
  }
  // Outside the registry's lock: an export may ask the driver.
  auto source = [finisher]() { return finisher->ExportRingFd(); };
  // The client proves it owns the stream with the secret when it fetches the ring.
  absl::StatusOr<HandOverRegistry::Registration> registration =
      registry_.Register(stream->id(), std::move(source), std::move(wake));
  if (!registration.ok()) return registration.status();
  return std::make_unique<Stream>(this, stream, finisher, *registration);
}

bool DeviceTransport::Serves(uint64_t stream_id) const { return registry_.Contains(stream_id); }

absl::StatusOr<UniqueFd> DeviceTransport::RegionFd(uint64_t stream_id, const Secret& secret) {
  return registry_.HandOver(stream_id, secret);
}

}  // namespace conveyor::server
