#include "server/transport/data_socket.h"

#include "server/transport/secret.h"

namespace conveyor::server {

namespace {

class DataSocketStream final : public StreamTransport {
 public:
  DataSocketStream(const std::shared_ptr<Stream>& stream, const Secret& secret, int port,
                   std::unique_ptr<DataSocketServer::Channel> channel)
      : stream_(stream), secret_(secret), port_(port), channel_(std::move(channel)) {}
  // Destroying the channel closes it: what is queued is still written.

  void DescribeIn(v1::StreamOpened* opened) const override {
    v1::DataSocketOpened* d = opened->mutable_data_socket();
    d->set_secret(secret_.data(), secret_.size());
    d->set_data_port(static_cast<uint32_t>(port_));
  }

  void Deliver(const BatchInfo& batch, v1::Batch* message) override {
    // Queued before the header is sent: the client reads the header, then
    // these bytes. The slot is not reused before the client releases it,
    // which it does only after reading them; the stream (owner of the slot
    // memory) stays alive while the bytes wait.
    const uint8_t* images = stream_->arena().slot(batch.slot) + stream_->layout().images_offset;
    channel_->Send(images, message->images_bytes(), stream_);
  }

  void Finish(const absl::Status& end) override {
    // Batches already sent over gRPC stay readable on the data socket after
    // the call ends, unless nobody is left to read them.
    if (!ClientStillReads(end)) channel_->Abort();
  }

 private:
  const std::shared_ptr<Stream> stream_;
  const Secret secret_;
  const int port_;
  const std::unique_ptr<DataSocketServer::Channel> channel_;
};

}  // namespace

absl::Status DataSocketTransport::CanServe(const v1::OpenStream& request,
                                           const ClientIdentity& client) const {
  if (client.is_unix()) {
    return absl::FailedPreconditionError(
        "DATA_SOCKET is for TCP connections; over the unix socket use SHARED_MEMORY or AUTO");
  }
  if (server_ == nullptr) {
    return absl::FailedPreconditionError(
        "this daemon has no data socket (listen.data_tcp is none); use INLINE or AUTO");
  }
  return absl::OkStatus();
}

bool DataSocketTransport::OfferedByAuto(const v1::OpenStream& request,
                                        const ClientIdentity& client) const {
  return request.accept_data_socket() && CanServe(request, client).ok();
}

absl::StatusOr<std::unique_ptr<StreamTransport>> DataSocketTransport::Open(
    const std::shared_ptr<Stream>& stream, std::function<void()> /*wake*/) {
  // The client proves it owns the stream with this when it connects.
  Secret secret;
  if (absl::Status st = NewSecret(&secret); !st.ok()) return st;
  // A failed connection ends the stream with its reason; the call then
  // finishes with it.
  std::unique_ptr<DataSocketServer::Channel> channel =
      server_->Open(stream->id(), secret, [weak = std::weak_ptr<Stream>(stream)](absl::Status why) {
        if (auto s = weak.lock()) s->Cancel(std::move(why));
      });
  return std::make_unique<DataSocketStream>(stream, secret, server_->port(), std::move(channel));
}

}  // namespace conveyor::server
