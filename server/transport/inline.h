// InlineTransport: INLINE streams, for any client: each Batch message
// carries its images (one copy of the bytes into the message). Always
// offered last by TRANSPORT_AUTO. A stream whose batch would not fit in the
// largest message the daemon sends is refused.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>

#include "server/transport/transport.h"

namespace conveyor::server {

class InlineTransport final : public Transport {
 public:
  // `max_message_bytes`: the largest message the daemon may send.
  explicit InlineTransport(uint64_t max_message_bytes) : max_message_bytes_(max_message_bytes) {}

  v1::Transport kind() const override { return v1::INLINE; }
  absl::Status CanServe(const v1::OpenStream& request,
                        const ClientIdentity& client) const override {
    return absl::OkStatus();
  }
  absl::Status CheckLayout(const BatchLayout& layout) const override;
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override;

 private:
  const uint64_t max_message_bytes_;
};

}  // namespace conveyor::server
