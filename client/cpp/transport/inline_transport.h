// InlineTransport (INLINE): the bytes are in the Batch message; View()
// moves them into the lease. Nothing to open or close. See
// client_transport.h for the interface and its thread-safety contract.
#pragma once

#include "client/cpp/transport/client_transport.h"

namespace conveyor::client {

class InlineTransport final : public ClientTransport {
 public:
  v1::Transport kind() const override { return v1::INLINE; }
  absl::StatusOr<BatchBytes> View(v1::Batch& batch, uint64_t bytes) override;
};

}  // namespace conveyor::client
