// DataSocketTransport (DATA_SOCKET, TCP): the connection to the daemon's
// data socket, on which exactly each Batch's images_bytes follow in order,
// read into a buffer of the batch's slot (reused only once the slot was
// released and filled again). See client_transport.h for the interface and
// its thread-safety contract.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/transport/client_transport.h"
#include "core/base/unique_fd.h"

namespace conveyor::client {

class DataSocketTransport final : public ClientTransport {
 public:
  // Connects to options.data_host at the port of `opened` (details
  // data_socket) and makes the handshake. INTERNAL protocol error when
  // there is no TCP host (the daemon chose DATA_SOCKET on a unix socket).
  static absl::StatusOr<std::unique_ptr<DataSocketTransport>> Open(const v1::StreamOpened& opened,
                                                                   const TransportOptions& options);

  // Over a connection already made (tests and Open).
  explicit DataSocketTransport(UniqueFd socket) : socket_(std::move(socket)) {}

  v1::Transport kind() const override { return v1::DATA_SOCKET; }
  absl::StatusOr<BatchBytes> View(v1::Batch& batch, uint64_t bytes) override;

 private:
  UniqueFd socket_;
  std::map<uint32_t, std::vector<uint8_t>> slot_buffers_;
};

}  // namespace conveyor::client
