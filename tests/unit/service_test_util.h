// Test helpers for the service and its gRPC adapter: ServiceFixture, a
// ConveyorService over a small ImageFolder with the daemon's transports
// (shared memory, a data-socket transport without a data socket, inline)
// and its gRPC adapter on an in-process channel; request builders; and
// Eventually (polls a condition with a deadline). For the test's main
// thread; compiled only with the server library.
#pragma once

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "conveyor/v1/conveyor.grpc.pb.h"
#include "core/engine/engine.h"
#include "server/service/grpc_service.h"
#include "server/service/service.h"
#include "server/transport/data_socket.h"
#include "server/transport/inline.h"
#include "server/transport/shm.h"
#include "tests/unit/eventually.h"
#include "tests/unit/test_images.h"

namespace conveyor::server {

using testing::Eventually;

inline const ClientIdentity kUnixPeer = ClientIdentity::FromPeer("unix:/run/conveyor/test.sock");
inline const ClientIdentity kTcpPeer = ClientIdentity::FromPeer("ipv4:10.0.0.1:4000");

// ShmTransport, offered to every peer: the in-process channel's peer is not
// a unix socket, yet the reactor's wait for the hand-over is what the
// tests look at. Everything else is the real transport's.
class AnyPeerShm final : public Transport {
 public:
  explicit AnyPeerShm(ShmTransport* shm) : shm_(shm) {}
  v1::Transport kind() const override { return v1::SHARED_MEMORY; }
  absl::Status CanServe(const v1::OpenStream&, const ClientIdentity&) const override {
    return absl::OkStatus();
  }
  SlotMemory slot_memory() const override { return SlotMemory::kMemfd; }
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override {
    return shm_->Open(stream, std::move(wake));
  }

 private:
  ShmTransport* const shm_;
};

struct ServiceFixtureOptions {
  ErrorPolicy error_policy = ErrorPolicy::kSkip;
  bool corrupt_sample = false;  // a last sample that is not a JPEG
  // More files in class_1 that are not JPEGs, by name (any bytes but '/').
  std::vector<std::string> corrupt_names;
  bool shm_for_every_peer = false;
  std::chrono::milliseconds handover_grace{10'000};
  uint64_t memory_budget = 64ull << 20;
  std::chrono::milliseconds stream_idle_timeout{0};
  ClientLimits per_client;
  // Who the gRPC adapter says each call's client is; null: by peer alone.
  const ClientIdentifier* identifier = nullptr;
};

// A service over a small ImageFolder (2 classes × 3 images, 32 px output),
// with a shared-memory transport (fd socket path in the temp folder, not
// served unless a test starts an FdServer) and inline; and the gRPC adapter
// on an in-process channel.
struct ServiceFixture {
  explicit ServiceFixture(ServiceFixtureOptions o = {}) {
    testing::MakeImageFolder(dir.Sub("images"), 2, 3, 48, 40);
    if (o.corrupt_sample) {
      // Sorted last: class_1, after img_1000 … img_1002.
      dir.Write("images/class_1/img_9999.jpg", "this is not a JPEG file");
    }
    for (const std::string& name : o.corrupt_names) {
      dir.Write("images/class_1/" + name, "this is not a JPEG file either");
    }
    auto index = DatasetIndex::LoadImageFolder(dir.Sub("images"));
    REQUIRE(index.ok());
    auto p = std::make_shared<PipelineConfig>();
    p->name = "test";
    p->dataset = *index;
    p->transform.output_height = p->transform.output_width = 32;
    p->error_policy = o.error_policy;
    REQUIRE(ValidatePipelineConfig(*p).ok());

    EngineOptions eo;
    eo.num_threads = 2;
    auto engine = Engine::Create(eo);
    REQUIRE(engine.ok());
    fd_path = dir.Sub("conveyor.sock.fd");
    auto shm_owned = std::make_unique<ShmTransport>(fd_path);
    shm = shm_owned.get();
    std::vector<std::unique_ptr<Transport>> transports;
    if (o.shm_for_every_peer) transports.push_back(std::make_unique<AnyPeerShm>(shm));
    transports.push_back(std::move(shm_owned));
    transports.push_back(std::make_unique<DataSocketTransport>(nullptr));  // no data socket
    transports.push_back(std::make_unique<InlineTransport>(64ull << 20));

    ServiceOptions so;
    so.memory_budget = o.memory_budget;
    so.max_streams = 256;
    so.handover_grace = o.handover_grace;
    so.stream_idle_timeout = o.stream_idle_timeout;
    so.per_client = o.per_client;
    auto created = ConveyorService::Create(so, {p}, *std::move(engine),
                                           std::make_unique<TransportSet>(std::move(transports)));
    REQUIRE(created.ok());
    service = *std::move(created);

    grpc_service = std::make_unique<GrpcConveyorService>(
        service.get(), o.identifier != nullptr ? o.identifier : &identifier);
    grpc::ServerBuilder builder;
    builder.RegisterService(grpc_service.get());
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    stub = v1::Conveyor::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  }

  ~ServiceFixture() {
    service->BeginShutdown();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  uint64_t BytesInUse() const { return service->GetStats().slot_bytes_in_use(); }

  testing::TempDir dir;
  std::string fd_path;
  ShmTransport* shm = nullptr;  // owned by the service
  std::unique_ptr<ConveyorService> service;
  ClientIdentifier identifier;
  std::unique_ptr<GrpcConveyorService> grpc_service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Conveyor::Stub> stub;
};

inline v1::OpenStream Request(uint32_t batch_size = 2,
                              v1::Transport transport = v1::TRANSPORT_AUTO) {
  v1::OpenStream r;
  r.set_pipeline("test");
  r.set_batch_size(batch_size);
  r.set_credits(2);
  r.set_num_epochs(1);
  r.set_shuffle(false);
  r.set_transport(transport);
  return r;
}

inline v1::ClientMessage OpenMessage(const v1::OpenStream& r) {
  v1::ClientMessage m;
  *m.mutable_open() = r;
  return m;
}

inline v1::ClientMessage ReleaseMessage(uint32_t slot) {
  v1::ClientMessage m;
  m.mutable_release()->add_slots(slot);
  return m;
}

inline Secret SecretOf(const v1::StreamOpened& opened) {
  Secret s{};
  const std::string& secret =
      opened.has_data_socket() ? opened.data_socket().secret() : opened.shared_memory().secret();
  REQUIRE(secret.size() == s.size());
  std::memcpy(s.data(), secret.data(), s.size());
  return s;
}

}  // namespace conveyor::server
