// SharedMemoryTransport (SHARED_MEMORY, unix socket): the stream's memfd,
// fetched once on the fd hand-over socket and mapped read-only; a batch's
// images are images_bytes at images_offset of the mapping. With pin_memory
// the mapping is also page-locked for CUDA (HostRegistration), and
// unregistered before it is unmapped. See client_transport.h for the
// interface and its thread-safety contract.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "client/cpp/cuda/host_registration.h"
#include "client/cpp/mapped_region.h"
#include "client/cpp/transport/client_transport.h"

namespace conveyor::client {

class SharedMemoryTransport final : public ClientTransport {
 public:
  // Fetches and maps the region of `opened` (whose details are
  // shared_memory), then page-locks it when options.pin_memory.
  static absl::StatusOr<std::unique_ptr<SharedMemoryTransport>> Open(
      const v1::StreamOpened& opened, const TransportOptions& options);

  // Over an fd already received (tests and Open).
  static absl::StatusOr<std::unique_ptr<SharedMemoryTransport>> FromFd(
      int fd, uint64_t region_bytes, const TransportOptions& options);

  v1::Transport kind() const override { return v1::SHARED_MEMORY; }
  absl::StatusOr<BatchBytes> View(v1::Batch& batch, uint64_t bytes) override;

  bool pinned() const { return pinned_.registered(); }

 private:
  SharedMemoryTransport() = default;
  // Destroyed in reverse: the registration goes before the mapping.
  MappedRegion region_;
  HostRegistration pinned_;
};

}  // namespace conveyor::client
