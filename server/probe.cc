#include "server/probe.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

namespace conveyor::server {

absl::Status Probe(const std::string& target, double timeout_seconds) {
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  // HealthCheckRequest{service: ""} encodes to no bytes; the reply
  // HealthCheckResponse{status = 1 (SERVING)} to 08 01. Raw bytes spare us
  // the health proto's generated code.
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat(target, ": health check failed: ", status.error_message()));
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& sl : slices)
      bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  if (bytes.size() == 2 && bytes[0] == 0x08 && bytes[1] == 0x01) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(target, ": not serving"));
}

}  // namespace conveyor::server
