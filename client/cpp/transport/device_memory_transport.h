// DeviceMemoryTransport (DEVICE_MEMORY, unix socket): the daemon's ring of
// device buffers on the GPU the client named, one slot per credit. Its fd
// comes over the fd hand-over socket exactly as SHARED_MEMORY's memfd; the
// region is imported with the CUDA driver (DeviceMapping) and a batch gives
// a device address, images_offset into the region. The daemon sends a Batch
// only once its bytes are on the device, so a batch is ready when it
// arrives: there is no stream or event to wait on.
//
// When the daemon runs its host model of the device API (a test aid:
// StreamOpened.device_memory.host_model) the fd is a memfd: it is mapped
// read-only instead, and a batch's bytes are readable from the host (its
// device address is then the mapped address). See client_transport.h for
// the interface and its thread-safety contract.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "client/cpp/cuda/device_mapping.h"
#include "client/cpp/mapped_region.h"
#include "client/cpp/transport/client_transport.h"

namespace conveyor::client {

class DeviceMemoryTransport final : public ClientTransport {
 public:
  // Fetches the region's fd of `opened` (details device_memory) and imports
  // or maps it.
  static absl::StatusOr<std::unique_ptr<DeviceMemoryTransport>> Open(
      const v1::StreamOpened& opened, const TransportOptions& options);

  // Over an fd already received (tests and Open).
  static absl::StatusOr<std::unique_ptr<DeviceMemoryTransport>> FromFd(
      int fd, const v1::DeviceMemoryOpened& opened, const TransportOptions& options);

  v1::Transport kind() const override { return v1::DEVICE_MEMORY; }
  absl::StatusOr<BatchBytes> View(v1::Batch& batch, uint64_t bytes) override;
  absl::Status CopyToHost(const BatchBytes& view, uint64_t length, uint8_t* out) const override;

  bool host_model() const { return host_region_.mapped(); }

 private:
  DeviceMemoryTransport() = default;
  MappedRegion host_region_;  // host model
  DeviceMapping device_;      // a real GPU
};

}  // namespace conveyor::client
