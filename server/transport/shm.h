// ShmTransport: SHARED_MEMORY streams, for clients on the daemon's unix
// socket. Each stream's slots live in a memfd; the client fetches the memfd
// once on the fd hand-over socket (server/transport/fd_server.h), proving with the
// stream's secret from StreamOpened that the stream is its own, and maps
// it. A Batch then carries only where its images are in the region.
//
// The transport keeps the registry the fd hand-over socket consults
// (RegionFd, a HandOverRegistry): stream id → secret and a duplicate of the
// region's memfd, from Open until the stream's transport is destroyed.
// Because a short stream can end before its client fetched the region, a
// stream that ended by itself (or by a data error) asks its call to wait
// for the hand-over (MustWaitForClient) and wakes it when the hand-over
// happens.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/base/unique_fd.h"
#include "server/transport/hand_over_registry.h"
#include "server/transport/secret.h"
#include "server/transport/transport.h"

namespace conveyor::server {

class ShmTransport final : public Transport {
 public:
  // `fd_socket_path`: the fd hand-over socket clients are told to use; ""
  // when the daemon has none (then no stream can share memory).
  explicit ShmTransport(std::string fd_socket_path) : fd_socket_path_(std::move(fd_socket_path)) {}
  ~ShmTransport() override;  // REQUIRES: every stream transport it opened is gone

  v1::Transport kind() const override { return v1::SHARED_MEMORY; }
  absl::Status CanServe(const v1::OpenStream& request, const ClientIdentity& client) const override;
  SlotMemory slot_memory() const override { return SlotMemory::kMemfd; }
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override;

  // The fd hand-over: a duplicate of stream `stream_id`'s region memfd when
  // `secret` is its secret (compared in constant time); PermissionDenied
  // otherwise, without saying whether the stream exists. Wakes the stream's
  // call (outside the lock).
  absl::StatusOr<UniqueFd> RegionFd(uint64_t stream_id, const Secret& secret);

 private:
  class Stream;

  const std::string fd_socket_path_;
  // Each entry's source holds a duplicate of the region memfd and hands
  // over a duplicate of that.
  HandOverRegistry registry_;
};

}  // namespace conveyor::server
