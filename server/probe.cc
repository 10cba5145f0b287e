#include "server/probe.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace conveyor::server {

absl::Status Probe(const std::string& target, double timeout_seconds) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  std::unique_ptr<grpc::health::v1::Health::Stub> stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  grpc::health::v1::HealthCheckRequest request;  // service "": the whole server
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat(target, ": health check failed: ", status.error_message()));
  }
  if (response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      target, ": not serving (",
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()), ")"));
}

}  // namespace conveyor::server
