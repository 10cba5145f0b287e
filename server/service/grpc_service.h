// GrpcConveyorService: the gRPC face of ConveyorService — a thin adapter
// built on gRPC's callback API. Every call first learns who its client is
// (server/access/identifier.h) and is refused with that status when the
// client may not call at all. Unary calls forward to the core service and
// convert its absl::Status once (ToGrpcStatus). Each StreamBatches call gets
// one StreamReactor (see grpc_service.cc), a thin adapter over the call's
// protocol (server/service/stream_call.h): at most one write in flight, woken by the
// stream's ready callback or by the end of its previous write.
//
// Thread-safety: gRPC calls the methods concurrently; the adapter holds no
// state of its own besides pointers to the core service and the identifier.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "conveyor/v1/conveyor.grpc.pb.h"
#include "server/access/identifier.h"
#include "server/service/service.h"

namespace conveyor::server {

// The one place where an absl::Status becomes a grpc::Status (the codes
// share their numbers).
grpc::Status ToGrpcStatus(const absl::Status& status);

// StreamBatches is registered raw (ByteBuffer in and out): the reactor
// parses each client message itself, so that a message that does not parse
// ends the call INVALID_ARGUMENT saying so — with typed reads gRPC reports
// it like the client's half-close.
using ConveyorCallbackBase = v1::Conveyor::WithCallbackMethod_ListPipelines<
    v1::Conveyor::WithRawCallbackMethod_StreamBatches<
        v1::Conveyor::WithCallbackMethod_GetStats<v1::Conveyor::Service>>>;

class GrpcConveyorService final : public ConveyorCallbackBase {
 public:
  // `service` and `identifier` are not owned and must outlive every call
  // (the daemon shuts the gRPC server down before destroying them).
  GrpcConveyorService(ConveyorService* service, const ClientIdentifier* identifier)
      : service_(service), identifier_(identifier) {}

  grpc::ServerUnaryReactor* ListPipelines(grpc::CallbackServerContext* context,
                                          const v1::ListPipelinesRequest* request,
                                          v1::ListPipelinesResponse* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const v1::GetStatsRequest* request,
                                     v1::GetStatsResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StreamBatches(
      grpc::CallbackServerContext* context) override;

 private:
  // Who the client of `context`'s call is, once its request metadata is
  // within bounds; the status to refuse the call with otherwise.
  absl::StatusOr<ClientIdentity> Admit(const grpc::CallbackServerContext& context) const;

  ConveyorService* const service_;
  const ClientIdentifier* const identifier_;
};

}  // namespace conveyor::server
