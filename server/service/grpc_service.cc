#include "server/service/grpc_service.h"

#include <grpcpp/alarm.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/base/tsan_annotations.h"
#include "server/service/stream_call.h"

namespace conveyor::server {

constexpr size_t kMaxStatusMessageBytes = 4096;

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // Messages may quote dataset or client text: escaped (valid UTF-8, no
  // control characters) and capped well under gRPC's 8 KiB metadata limit,
  // past which a client could not read the status at all.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      EscapeText(status.message(), kMaxStatusMessageBytes));
}

namespace {

// Request metadata the daemon takes per call. gRPC 1.51's own limit (8 KiB,
// grpc.max_metadata_size) is soft: it refuses only some of the calls over
// it (about one in five, measured with 9 to 64 KiB), and the metadata of
// the others stays with the call. Clients send a few short headers.
constexpr size_t kMaxRequestMetadataBytes = 8 << 10;

absl::Status CheckRequestMetadata(const grpc::CallbackServerContext& context) {
  size_t bytes = 0;
  // HTTP/2 counts 32 bytes per entry besides its name and value.
  for (const auto& [key, value] : context.client_metadata())
    bytes += key.size() + value.size() + 32;
  if (bytes <= kMaxRequestMetadataBytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("request metadata of ", bytes,
                                                   " bytes; the daemon takes at most ",
                                                   kMaxRequestMetadataBytes));
}

// A StreamBatches call refused before it began.
class RefusedStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// One StreamBatches call: a thin adapter that forwards every reaction to
// the call's protocol (server/service/stream_call.h) and carries out what it asks
// (reads, writes, Finish, the wait alarm). It parses each client message
// and serializes each server message itself (the method is raw).
// Reactions only start the next read or write; building messages happens
// in StreamCall::Pump.
class StreamReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                            private StreamCall::Rpc {
 public:
  StreamReactor(grpc::CallbackServerContext* context, ConveyorService* service,
                ClientIdentity client)
      : context_(context), call_(service, std::move(client), this) {
    call_.Start();
    TsanRelease(this);  // see core/base/tsan_annotations.h
  }

  void OnReadDone(bool ok) override {
    TsanReaction reaction(this);
    if (!ok) {
      call_.OnRead(nullptr);
      return;
    }
    v1::ClientMessage message;
    if (!grpc::SerializationTraits<v1::ClientMessage>::Deserialize(&request_, &message).ok()) {
      call_.OnUnparseable();
      return;
    }
    call_.OnRead(&message);
  }
  void OnWriteDone(bool ok) override {
    TsanReaction reaction(this);
    call_.OnWriteDone(ok);
  }
  void OnCancel() override {
    TsanReaction reaction(this);
    call_.OnCancel();
  }
  void OnDone() override {
    TsanAcquire(this);
    call_.Detach();
    delete this;
  }

 private:
  // StreamCall::Rpc
  void StartRead() override { ServerBidiReactor::StartRead(&request_); }
  void StartWrite(const v1::ServerMessage* message) override {
    bool own_buffer = false;
    response_.Clear();  // the previous write's, done with
    if (!grpc::SerializationTraits<v1::ServerMessage>::Serialize(*message, &response_, &own_buffer)
             .ok()) {
      // Only a message over 2 GiB fails, which the transports never build.
      // The write still happens (its end is what the call waits for); the
      // cancel makes it fail, and the call ends CANCELLED.
      response_.Clear();
      context_->TryCancel();
    }
    ServerBidiReactor::StartWrite(&response_);
  }
  void Finish(const absl::Status& status) override {
    ServerBidiReactor::Finish(ToGrpcStatus(status));
  }
  void SetWaitDeadline(std::chrono::system_clock::time_point deadline,
                       std::function<void()> expire) override {
    // Fired or cancelled (by the alarm's destructor), it calls `expire`,
    // which reaches the call only while it is attached.
    alarm_.Set(deadline, [expire = std::move(expire)](bool /*fired*/) { expire(); });
  }

  void Cancel() override { context_->TryCancel(); }

  grpc::CallbackServerContext* const context_;  // valid until OnDone
  grpc::ByteBuffer request_;                    // the read in flight's (one at a time)
  grpc::ByteBuffer response_;                   // the write in flight's (one at a time)
  grpc::Alarm alarm_;                           // cancelled by its destructor
  StreamCall call_;                             // destroyed before the alarm
};

}  // namespace

absl::StatusOr<ClientIdentity> GrpcConveyorService::Admit(
    const grpc::CallbackServerContext& context) const {
  RETURN_IF_ERROR(CheckRequestMetadata(context));
  return identifier_->Identify(context);
}

grpc::ServerUnaryReactor* GrpcConveyorService::ListPipelines(
    grpc::CallbackServerContext* context, const v1::ListPipelinesRequest* /*request*/,
    v1::ListPipelinesResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ClientIdentity> client = Admit(*context);
  if (!client.ok()) {
    reactor->Finish(ToGrpcStatus(client.status()));
    return reactor;
  }
  *response = service_->ListPipelines();
  // Only what this client may open (a token limited to some pipelines).
  auto* pipelines = response->mutable_pipelines();
  for (int i = pipelines->size() - 1; i >= 0; --i) {
    if (!client->MayOpen(pipelines->Get(i).name())) pipelines->DeleteSubrange(i, 1);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcConveyorService::GetStats(grpc::CallbackServerContext* context,
                                                        const v1::GetStatsRequest* /*request*/,
                                                        v1::GetStatsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ClientIdentity> client = Admit(*context);
  if (!client.ok()) {
    reactor->Finish(ToGrpcStatus(client.status()));
    return reactor;
  }
  *response = service_->GetStats(*client);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* GrpcConveyorService::StreamBatches(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<ClientIdentity> client = Admit(*context);
  if (!client.ok()) {
    service_->CountRefusedStream(client.status().code());
    return new RefusedStream(client.status());
  }
  return new StreamReactor(context, service_, *std::move(client));
}

}  // namespace conveyor::server
