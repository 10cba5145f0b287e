#include "client/cpp/transport/data_socket_transport.h"

#include "client/cpp/side_socket.h"
#include "core/base/status_macros.h"

namespace conveyor::client {

absl::StatusOr<std::unique_ptr<DataSocketTransport>> DataSocketTransport::Open(
    const v1::StreamOpened& opened, const TransportOptions& options) {
  if (!options.data_host) return ProtocolError("the daemon chose DATA_SOCKET on a unix socket");
  ASSIGN_OR_RETURN(UniqueFd socket,
                   ConnectDataSocket(*options.data_host, opened.data_socket().data_port(),
                                     opened.stream_id(), opened.data_socket().secret(),
                                     options.side_timeout, options.data_read_timeout));
  return std::make_unique<DataSocketTransport>(std::move(socket));
}

absl::StatusOr<BatchBytes> DataSocketTransport::View(v1::Batch& batch, uint64_t bytes) {
  RETURN_IF_ERROR(CheckImagesBytes(batch, bytes));
  std::vector<uint8_t>& buffer = slot_buffers_[batch.slot()];
  buffer.resize(bytes);
  RETURN_IF_ERROR(ReadFull(socket_.get(), buffer.data(), bytes, "data socket"));
  BatchBytes out;
  out.host = buffer.data();
  return out;
}

}  // namespace conveyor::client
