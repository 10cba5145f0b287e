#include "client/cpp/transport/client_transport.h"

#include <cstring>

namespace conveyor::client {

absl::Status ClientTransport::CopyToHost(const BatchBytes& view, uint64_t length,
                                         uint8_t* out) const {
  if (length == 0) return absl::OkStatus();
  if (view.host == nullptr) {
    return absl::FailedPreconditionError("the batch's bytes are not readable from the host");
  }
  std::memcpy(out, view.host, length);
  return absl::OkStatus();
}

absl::Status CheckImagesBytes(const v1::Batch& batch, uint64_t bytes) {
  if (batch.images_bytes() == bytes) return absl::OkStatus();
  return ProtocolError(absl::StrCat("batch ", batch.sequence(), ": images_bytes ",
                                    batch.images_bytes(), " does not match its shape and dtype (",
                                    bytes, " bytes)"));
}

}  // namespace conveyor::client
