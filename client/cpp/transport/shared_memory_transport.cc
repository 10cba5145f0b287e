#include "client/cpp/transport/shared_memory_transport.h"

#include "client/cpp/side_socket.h"
#include "core/base/status_macros.h"
#include "core/base/unique_fd.h"

namespace conveyor::client {

absl::StatusOr<std::unique_ptr<SharedMemoryTransport>> SharedMemoryTransport::Open(
    const v1::StreamOpened& opened, const TransportOptions& options) {
  const v1::SharedMemoryOpened& shm = opened.shared_memory();
  ASSIGN_OR_RETURN(UniqueFd fd, ReceiveRegionFd(shm.fd_socket(), opened.stream_id(), shm.secret(),
                                                options.side_timeout));
  return FromFd(fd.get(), shm.region_bytes(), options);  // the fd closes; the mapping stays
}

absl::StatusOr<std::unique_ptr<SharedMemoryTransport>> SharedMemoryTransport::FromFd(
    int fd, uint64_t region_bytes, const TransportOptions& options) {
  std::unique_ptr<SharedMemoryTransport> t(new SharedMemoryTransport());
  ASSIGN_OR_RETURN(t->region_, MappedRegion::Map(fd, region_bytes));
  if (options.pin_memory) {
    absl::StatusOr<std::shared_ptr<const CudaDriver>> driver = options.driver();
    if (!driver.ok()) {
      return absl::Status(driver.status().code(),
                          absl::StrCat("pin_memory: ", driver.status().message()));
    }
    ASSIGN_OR_RETURN(t->pinned_, HostRegistration::Register(*driver, options.gpu_uuid,
                                                            t->region_.data(), t->region_.size()));
  }
  return t;
}

absl::StatusOr<BatchBytes> SharedMemoryTransport::View(v1::Batch& batch, uint64_t bytes) {
  RETURN_IF_ERROR(CheckImagesBytes(batch, bytes));
  BatchBytes out;
  if (bytes > 0) {
    ASSIGN_OR_RETURN(out.host, region_.Bytes(batch.images_offset(), bytes));
  }
  return out;
}

}  // namespace conveyor::client
