#include "server/grpc_service.h"

#include <grpcpp/alarm.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/text_escape.h"
#include "server/stream_call.h"
#include "server/tsan_annotations.h"

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

// One StreamBatches call: a thin adapter that forwards every reaction to
// the call's protocol (server/stream_call.h) and carries out what it asks
// (reads, writes, Finish, the wait alarm). Reactions only start the next
// read or write; building messages happens in StreamCall::Pump.
class StreamReactor final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>,
                            private StreamCall::Rpc {
 public:
  StreamReactor(grpc::CallbackServerContext* context, ConveyorService* service,
                ClientIdentity client)
      : context_(context), call_(service, std::move(client), this) {
    call_.Start();
    TsanRelease(this);  // see server/tsan_annotations.h
  }

  void OnReadDone(bool ok) override {
    TsanReaction reaction(this);
    call_.OnRead(ok ? &request_ : nullptr);
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
    ServerBidiReactor::StartWrite(message);
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
  v1::ClientMessage request_;  // the read in flight's (one at a time)
  grpc::Alarm alarm_;          // cancelled by its destructor
  StreamCall call_;            // destroyed before the alarm
};

// A StreamBatches call refused before it starts: finishes with `status`.
class RefusedStreamReactor final
    : public grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage> {
 public:
  explicit RefusedStreamReactor(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerUnaryReactor* GrpcConveyorService::ListPipelines(
    grpc::CallbackServerContext* context, const v1::ListPipelinesRequest* /*request*/,
    v1::ListPipelinesResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ClientIdentity> client = identifier_->Identify(*context);
  if (!client.ok()) {
    reactor->Finish(ToGrpcStatus(client.status()));
    return reactor;
  }
  *response = service_->ListPipelines();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcConveyorService::GetStats(grpc::CallbackServerContext* context,
                                                        const v1::GetStatsRequest* /*request*/,
                                                        v1::GetStatsResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<ClientIdentity> client = identifier_->Identify(*context);
  if (!client.ok()) {
    reactor->Finish(ToGrpcStatus(client.status()));
    return reactor;
  }
  *response = service_->GetStats(*client);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>* GrpcConveyorService::StreamBatches(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<ClientIdentity> client = identifier_->Identify(*context);
  if (!client.ok()) return new RefusedStreamReactor(client.status());
  return new StreamReactor(context, service_, *std::move(client));
}

}  // namespace conveyor::server
