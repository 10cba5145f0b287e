// Fuzz target: bytes as what a client sends on a StreamBatches call, driven
// through the call's protocol (server/service/stream_call.h) into the service's
// request validation (ConveyorService::OpenStream) and Release handling,
// with no network: the RPC is a fake that records what the call asks of it.
// The service is a real one (engine with one worker, shared-memory, data
// socket without a socket, and inline transports) over a small in-memory
// dataset whose files do not exist, with 16×16 outputs.
//
// Input: byte 0 picks the peer (bit 0: a unix socket peer, else TCP);
// the rest is read as the wire format of a message `repeated ClientMessage
// m = 1` (each: tag 0x0a, varint length, a serialized v1::ClientMessage);
// parsing stops at the first field that is not one. The messages go to
// OnRead one by one (each write the call starts is completed), then the
// client half-closes and cancels.
// Properties: no sanitizer report; the call finishes exactly once, never
// with a write in flight, never with INTERNAL or UNKNOWN, and within 30 s;
// after Detach every byte of slot budget is back.
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/data/dataset_index.h"
#include "core/engine/engine.h"
#include "core/engine/pipeline_config.h"
#include "google/protobuf/io/coded_stream.h"
#include "server/service/service.h"
#include "server/service/stream_call.h"
#include "server/transport/data_socket.h"
#include "server/transport/inline.h"
#include "server/transport/shm.h"
#include "spdlog/spdlog.h"
#include "tests/fuzz/fuzz_target.h"
#include "tests/support/fake_stream_rpc.h"

namespace conveyor::fuzz {
namespace {

using server::StreamCall;

using FakeRpc = testing::FakeStreamRpc;

server::ConveyorService* MakeService() {
  std::vector<DatasetIndex::Entry> entries;
  for (int i = 0; i < 6; ++i) {
    entries.push_back(
        {"class_" + std::to_string(i % 2) + "/img_" + std::to_string(i) + ".jpg", i % 2});
  }
  auto index =
      DatasetIndex::FromEntries("/nonexistent/conveyor-fuzz", entries, {"class_0", "class_1"});
  FUZZ_CHECK(index.ok());
  auto p = std::make_shared<PipelineConfig>();
  p->name = "test";
  p->dataset = *index;
  p->transform.output_height = p->transform.output_width = 16;
  p->max_batch_size = 64;
  FUZZ_CHECK(ValidatePipelineConfig(*p).ok());
  EngineOptions eo;
  eo.num_threads = 1;
  auto engine = Engine::Create(eo);
  FUZZ_CHECK(engine.ok());
  std::vector<std::unique_ptr<server::Transport>> transports;
  transports.push_back(
      std::make_unique<server::ShmTransport>("/nonexistent/conveyor-fuzz.sock.fd"));
  transports.push_back(std::make_unique<server::DataSocketTransport>(nullptr));
  transports.push_back(std::make_unique<server::InlineTransport>(16ull << 20));
  server::ServiceOptions so;
  so.memory_budget = 16ull << 20;
  so.max_streams = 8;
  so.handover_grace = std::chrono::milliseconds(1);
  auto service = server::ConveyorService::Create(
      so, {p}, *std::move(engine), std::make_unique<server::TransportSet>(std::move(transports)));
  FUZZ_CHECK(service.ok());
  return service->release();  // deleted at exit (StopService)
}

server::ConveyorService* g_service = nullptr;

// Shuts the engine down and joins its workers before the process's static
// objects go, so that no worker outlives what it uses.
void StopService() {
  delete g_service;
  g_service = nullptr;
}

// The messages of the input after byte 0 (see the top of the file).
std::vector<v1::ClientMessage> ParseMessages(const uint8_t* data, size_t size) {
  std::vector<v1::ClientMessage> messages;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  while (messages.size() < 16) {
    const uint32_t tag = in.ReadTag();
    uint32_t length = 0;
    if (tag != 0x0a || !in.ReadVarint32(&length)) break;
    const auto limit = in.PushLimit(static_cast<int>(length));
    v1::ClientMessage m;
    if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage()) break;
    in.PopLimit(limit);
    messages.push_back(std::move(m));
  }
  return messages;
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // one log line per refused request otherwise
  conveyor::fuzz::g_service = conveyor::fuzz::MakeService();
  std::atexit(conveyor::fuzz::StopService);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  server::ConveyorService* const service = fuzz::g_service;
  if (size == 0 || size > (1u << 20)) return 0;
  const std::string peer = (data[0] & 1) ? "unix:/run/conveyor/fuzz.sock" : "ipv4:10.0.0.1:4000";
  const std::vector<v1::ClientMessage> messages = fuzz::ParseMessages(data + 1, size - 1);

  fuzz::FakeRpc rpc;
  {
    server::StreamCall call(service, server::ClientIdentity::FromPeer(peer), &rpc);
    call.Start();
    for (const v1::ClientMessage& m : messages) {
      call.OnRead(&m);
      if (rpc.TakeWrite()) call.OnWriteDone(true);
    }
    call.OnRead(nullptr);  // the client half-closes ...
    call.OnCancel();       // ... and goes
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!rpc.finished().has_value()) {
      FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);
      if (rpc.TakeWrite()) call.OnWriteDone(false);  // what gRPC does after a cancel
      if (auto expire = rpc.expire()) expire();
      std::this_thread::yield();
    }
    const absl::Status end = *rpc.finished();
    FUZZ_CHECK(end.code() != absl::StatusCode::kInternal);
    FUZZ_CHECK(end.code() != absl::StatusCode::kUnknown);
    FUZZ_CHECK(end.ok() || !end.message().empty());
    call.Detach();
  }
  FUZZ_CHECK(!rpc.misused());
  FUZZ_CHECK(service->GetStats().slot_bytes_in_use() == 0);
  return 0;
}
