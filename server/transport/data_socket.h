// DataSocketTransport: DATA_SOCKET streams, for clients that reach the
// daemon over TCP and say they read the data socket
// (OpenStream.accept_data_socket; explicit DATA_SOCKET requests need not).
// A Batch message carries the header; its images are queued, straight from
// the slot, on the stream's channel of the daemon's DataSocketServer
// (server/transport/data_socket_server.h), which writes them after every byte queued
// before. A failed data connection cancels the stream with its reason.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include "server/transport/data_socket_server.h"
#include "server/transport/transport.h"

namespace conveyor::server {

class DataSocketTransport final : public Transport {
 public:
  // `server` (not owned; outlives every stream) may be null: the daemon then
  // has no data socket and refuses DATA_SOCKET requests.
  explicit DataSocketTransport(DataSocketServer* server) : server_(server) {}

  v1::Transport kind() const override { return v1::DATA_SOCKET; }
  absl::Status CanServe(const v1::OpenStream& request, const ClientIdentity& client) const override;
  bool OfferedByAuto(const v1::OpenStream& request, const ClientIdentity& client) const override;
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override;

 private:
  DataSocketServer* const server_;
};

}  // namespace conveyor::server
