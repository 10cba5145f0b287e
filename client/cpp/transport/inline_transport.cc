#include "client/cpp/transport/inline_transport.h"

namespace conveyor::client {

absl::StatusOr<BatchBytes> InlineTransport::View(v1::Batch& batch, uint64_t bytes) {
  if (batch.images().size() != bytes) {
    return ProtocolError(absl::StrCat("batch ", batch.sequence(), ": ", batch.images().size(),
                                      " inline bytes do not match its shape and dtype (", bytes,
                                      " bytes)"));
  }
  BatchBytes out;
  out.owned = std::make_unique<std::string>(std::move(*batch.mutable_images()));
  batch.clear_images();
  batch.set_images_bytes(bytes);
  out.host = reinterpret_cast<const uint8_t*>(out.owned->data());
  return out;
}

}  // namespace conveyor::client
