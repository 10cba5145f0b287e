#include "client/cpp/transport/open_transport.h"

#include "client/cpp/transport/data_socket_transport.h"
#include "client/cpp/transport/device_memory_transport.h"
#include "client/cpp/transport/inline_transport.h"
#include "client/cpp/transport/shared_memory_transport.h"

namespace conveyor::client {
namespace {

// Whether the oneof `details` of `opened` fits its transport (INLINE may
// leave it unset).
bool DetailsFit(const v1::StreamOpened& opened) {
  switch (opened.transport()) {
    case v1::SHARED_MEMORY: return opened.has_shared_memory();
    case v1::DATA_SOCKET: return opened.has_data_socket();
    case v1::DEVICE_MEMORY: return opened.has_device_memory();
    case v1::INLINE:
      return opened.details_case() == v1::StreamOpened::DETAILS_NOT_SET ||
             opened.has_inline_message();
    default: return false;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClientTransport>> OpenClientTransport(
    const v1::StreamOpened& opened, const TransportOptions& options) {
  if (!DetailsFit(opened)) {
    return ProtocolError(
        absl::StrCat("the daemon chose transport ", v1::Transport_Name(opened.transport()), " (",
                     static_cast<int>(opened.transport()), ") with details of kind ",
                     static_cast<int>(opened.details_case())));
  }
  if (options.pin_memory && opened.transport() != v1::SHARED_MEMORY) {
    return absl::InvalidArgumentError(
        absl::StrCat("pin_memory needs a SHARED_MEMORY stream (a unix socket); the daemon chose ",
                     v1::Transport_Name(opened.transport())));
  }
  switch (opened.transport()) {
    case v1::SHARED_MEMORY: return SharedMemoryTransport::Open(opened, options);
    case v1::DATA_SOCKET: return DataSocketTransport::Open(opened, options);
    case v1::DEVICE_MEMORY: return DeviceMemoryTransport::Open(opened, options);
    default: return std::make_unique<InlineTransport>();
  }
}

}  // namespace conveyor::client
