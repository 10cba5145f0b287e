#include "client/cpp/transport/device_memory_transport.h"

#include "client/cpp/side_socket.h"
#include "core/base/status_macros.h"
#include "core/base/unique_fd.h"

namespace conveyor::client {

absl::StatusOr<std::unique_ptr<DeviceMemoryTransport>> DeviceMemoryTransport::Open(
    const v1::StreamOpened& opened, const TransportOptions& options) {
  const v1::DeviceMemoryOpened& dm = opened.device_memory();
  ASSIGN_OR_RETURN(UniqueFd fd, ReceiveRegionFd(dm.fd_socket(), opened.stream_id(), dm.secret(),
                                                options.side_timeout));
  return FromFd(fd.get(), dm, options);  // the fd closes; the import or mapping stays
}

absl::StatusOr<std::unique_ptr<DeviceMemoryTransport>> DeviceMemoryTransport::FromFd(
    int fd, const v1::DeviceMemoryOpened& opened, const TransportOptions& options) {
  std::unique_ptr<DeviceMemoryTransport> t(new DeviceMemoryTransport());
  if (opened.host_model()) {
    ASSIGN_OR_RETURN(t->host_region_, MappedRegion::Map(fd, opened.region_bytes()));
    return t;
  }
  absl::StatusOr<std::shared_ptr<const CudaDriver>> driver = options.driver();
  if (!driver.ok()) {
    return absl::Status(driver.status().code(),
                        absl::StrCat("DEVICE_MEMORY: ", driver.status().message()));
  }
  // The daemon's spelling of the GPU it allocated on (the client's request
  // echoed back); the client's own when the daemon left it empty.
  const std::string& uuid = opened.gpu_uuid().empty() ? options.gpu_uuid : opened.gpu_uuid();
  ASSIGN_OR_RETURN(t->device_, DeviceMapping::Import(*driver, uuid, fd, opened.region_bytes()));
  return t;
}

absl::StatusOr<BatchBytes> DeviceMemoryTransport::View(v1::Batch& batch, uint64_t bytes) {
  RETURN_IF_ERROR(CheckImagesBytes(batch, bytes));
  BatchBytes out;
  if (host_model()) {
    if (bytes > 0) {
      ASSIGN_OR_RETURN(out.host, host_region_.Bytes(batch.images_offset(), bytes));
      out.device = reinterpret_cast<uintptr_t>(out.host);
    }
    return out;
  }
  const uint64_t offset = batch.images_offset();
  if (offset > device_.size() || bytes > device_.size() - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + bytes,
                                              ") lie outside the ", device_.size(),
                                              "-byte device region"));
  }
  out.device = device_.base() + offset;
  return out;
}

absl::Status DeviceMemoryTransport::CopyToHost(const BatchBytes& view, uint64_t length,
                                               uint8_t* out) const {
  if (host_model() || length == 0) return ClientTransport::CopyToHost(view, length, out);
  return device_.CopyToHost(view.device - device_.base(), length, out);
}

}  // namespace conveyor::client
