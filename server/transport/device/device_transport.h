// DeviceTransport: DEVICE_MEMORY streams, for clients on the daemon's unix
// socket that name a GPU of the daemon's host by UUID
// (OpenStream.device.gpu_uuid; ordinals differ between processes under
// CUDA_VISIBLE_DEVICES). Each stream's batches land in a ring of device
// buffers on that GPU (DeviceFinisher: host slots page-locked, copied and
// converted on the device, a batch delivered only once its bytes are
// there); the client fetches the ring once on the fd hand-over socket
// (server/transport/fd_server.h) with the stream's secret, as a
// SHARED_MEMORY client fetches its memfd, and maps it (a CUDA VMM POSIX-fd
// handle; under the host model a memfd to mmap). A Batch then carries where
// its images are in the ring and their device dtype and size.
//
// Never offered by AUTO. A host without a usable GPU (no driver, no device,
// an unknown UUID) refuses such a stream with FAILED_PRECONDITION naming
// why; its host streams are not affected. Device bytes count against the
// per-GPU budget (GpuBudget).
//
// The registry the fd hand-over consults (RegionFd, a HandOverRegistry)
// holds stream id → secret and the stream's finisher, from Open until the
// stream's transport is destroyed; a stream that ended by itself asks its
// call to wait for the hand-over (MustWaitForClient), as ShmTransport does.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/base/unique_fd.h"
#include "core/gpu/device_api.h"
#include "server/transport/device/device_finisher.h"
#include "server/transport/device/gpu_budget.h"
#include "server/transport/hand_over_registry.h"
#include "server/transport/secret.h"
#include "server/transport/transport.h"

namespace conveyor::server {

class DeviceTransport final : public Transport {
 public:
  // `fd_socket_path`: the fd hand-over socket clients are told to use; ""
  // when the daemon has none (then no device stream can be served).
  DeviceTransport(std::shared_ptr<gpu::DeviceApi> api, std::shared_ptr<GpuBudget> budget,
                  std::string fd_socket_path);
  ~DeviceTransport() override;  // REQUIRES: every stream transport it opened is gone

  v1::Transport kind() const override { return v1::DEVICE_MEMORY; }
  absl::Status CanServe(const v1::OpenStream& request, const ClientIdentity& client) const override;
  bool OfferedByAuto(const v1::OpenStream&, const ClientIdentity&) const override { return false; }
  SlotMemory slot_memory() const override { return SlotMemory::kDevice; }
  bool collate_uint8() const override { return true; }
  absl::StatusOr<std::shared_ptr<BatchFinisher>> MakeFinisher(
      const v1::OpenStream& request, const PipelineConfig& pipeline) const override;
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override;

  // Whether `stream_id` is a stream of this transport (the fd hand-over
  // asks this one for its region then).
  bool Serves(uint64_t stream_id) const;

  // The fd hand-over: a new fd of stream `stream_id`'s device ring when
  // `secret` is its secret (compared in constant time); PermissionDenied
  // otherwise, without saying whether the stream exists. Wakes the stream's
  // call (outside the lock).
  absl::StatusOr<UniqueFd> RegionFd(uint64_t stream_id, const Secret& secret);

  gpu::DeviceApi& api() const { return *api_; }
  GpuBudget& budget() const { return *budget_; }

 private:
  class Stream;

  const std::shared_ptr<gpu::DeviceApi> api_;
  const std::shared_ptr<GpuBudget> budget_;
  const std::string fd_socket_path_;
  // Each entry's source holds the stream's finisher and exports its ring
  // (outside the registry's lock: an export may ask the driver).
  HandOverRegistry registry_;
};

}  // namespace conveyor::server
