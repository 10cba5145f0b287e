#include "server/transport/shm.h"

#include <fcntl.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"

namespace conveyor::server {

class ShmTransport::Stream final : public StreamTransport {
 public:
  Stream(ShmTransport* owner, const std::shared_ptr<conveyor::Stream>& stream,
         const HandOverRegistry::Registration& registration)
      : owner_(owner),
        stream_id_(stream->id()),
        stream_(stream.get()),
        secret_(registration.secret),
        handed_over_(registration.handed_over) {}
  ~Stream() override { owner_->registry_.Unregister(stream_id_); }

  void DescribeIn(v1::StreamOpened* opened) const override {
    v1::SharedMemoryOpened* shm = opened->mutable_shared_memory();
    shm->set_secret(secret_.data(), secret_.size());
    shm->set_fd_socket(owner_->fd_socket_path_);
    shm->set_region_bytes(stream_->arena().total_bytes());
    shm->set_slot_bytes(stream_->arena().slot_bytes());
    shm->set_num_slots(static_cast<uint32_t>(stream_->arena().num_slots()));
  }

  void Deliver(const BatchInfo& batch, v1::Batch* message) override {
    message->set_images_offset(stream_->arena().slot_offset(batch.slot) +
                               stream_->layout().images_offset);
  }

  // The batches before the end are in the region: a client that has not
  // fetched it yet (and is still there to) needs the registry entry, which
  // goes with this object when the call ends.
  bool MustWaitForClient(const absl::Status& end) const override {
    return ClientStillReads(end) && !handed_over_->load(std::memory_order_acquire);
  }

 private:
  ShmTransport* const owner_;  // not owned; outlives this
  const uint64_t stream_id_;
  conveyor::Stream* const stream_;  // not owned; the session keeps it alive
  const Secret secret_;
  const std::shared_ptr<const std::atomic<bool>> handed_over_;
};

ShmTransport::~ShmTransport() = default;

absl::Status ShmTransport::CanServe(const v1::OpenStream& request,
                                    const ClientIdentity& client) const {
  if (!client.is_unix()) {
    return absl::FailedPreconditionError(
        absl::StrCat("SHARED_MEMORY needs a connection over the daemon's unix socket; this one is ",
                     client.Describe(), " (use INLINE or AUTO over TCP)"));
  }
  if (fd_socket_path_.empty()) {
    return absl::FailedPreconditionError("this daemon has no fd hand-over socket");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StreamTransport>> ShmTransport::Open(
    const std::shared_ptr<conveyor::Stream>& stream, std::function<void()> wake) {
  auto region_fd = std::make_shared<UniqueFd>(::fcntl(stream->arena().fd(), F_DUPFD_CLOEXEC, 0));
  if (!*region_fd) return PosixError("dup of the region memfd", errno);
  // Handed over duplicated again on each request.
  auto source = [region_fd]() -> absl::StatusOr<UniqueFd> {
    UniqueFd fd(::fcntl(region_fd->get(), F_DUPFD_CLOEXEC, 0));
    if (!fd) return PosixError("dup of the region memfd", errno);
    return fd;
  };
  // The client proves it owns the stream with the secret when it fetches the memfd.
  absl::StatusOr<HandOverRegistry::Registration> registration =
      registry_.Register(stream->id(), std::move(source), std::move(wake));
  if (!registration.ok()) return registration.status();
  return std::make_unique<Stream>(this, stream, *registration);
}

absl::StatusOr<UniqueFd> ShmTransport::RegionFd(uint64_t stream_id, const Secret& secret) {
  return registry_.HandOver(stream_id, secret);
}

}  // namespace conveyor::server
