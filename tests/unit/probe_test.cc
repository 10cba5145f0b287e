// Tests of conveyord --probe (server/probe.h) against a real gRPC server on
// a unix socket with gRPC's default health service, as the daemon runs it:
// SERVING is OK, NOT_SERVING and an absent server are Unavailable naming the
// target. Linking the generated grpc.health.v1 client next to gRPC's own
// health service is part of what is tested (a clash of descriptors would
// abort the binary at start). Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "server/probe.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

struct HealthServer {
  explicit HealthServer(const std::string& socket) : target("unix://" + socket) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target, grpc::InsecureServerCredentials());
    // gRPC starts no server without a service of the caller's (the daemon
    // has its own): one that answers nothing stands in for it.
    builder.RegisterCallbackGenericService(&unused);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    REQUIRE(server->GetHealthCheckService() != nullptr);
  }
  ~HealthServer() { server->Shutdown(); }
  void SetServing(bool serving) { server->GetHealthCheckService()->SetServingStatus(serving); }

  const std::string target;
  grpc::CallbackGenericService unused;
  std::unique_ptr<grpc::Server> server;
};

TEST_CASE("probe: a SERVING daemon is OK, a NOT_SERVING one is not", "[probe]") {
  testing::TempDir dir;
  HealthServer s(dir.Sub("health.sock"));
  s.SetServing(true);
  CHECK(Probe(s.target, 10).ok());

  s.SetServing(false);  // as the daemon does when it begins to shut down
  const absl::Status st = Probe(s.target, 10);
  CHECK(absl::IsUnavailable(st));
  CHECK(std::string(st.message()).find(s.target) == 0);
  CHECK(std::string(st.message()).find("NOT_SERVING") != std::string::npos);

  s.SetServing(true);
  CHECK(Probe(s.target, 10).ok());
}

TEST_CASE("probe: no daemon at the target is Unavailable naming it", "[probe]") {
  testing::TempDir dir;
  const std::string target = "unix://" + dir.Sub("nobody.sock");
  const absl::Status st = Probe(target, 0.5);
  CHECK(absl::IsUnavailable(st));
  CHECK(std::string(st.message()).find(target + ": health check failed") == 0);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
