// The transport's hook into the engine (server/transport/transport.h): the
// service puts a transport's slot memory kind, collate_uint8 and finisher
// into the stream's options, so the stream's arena is of that kind, its
// host slots hold uint8 for a float32 pipeline, and every batch passes
// through the finisher (here one that calls done inside Finish); a
// MakeFinisher error refuses the stream with it, holding no budget.
// Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/batch_finisher.h"
#include "core/engine/engine.h"
#include "server/service/service.h"
#include "server/transport/inline.h"
#include "tests/unit/engine_test_util.h"

namespace conveyor::server {
namespace {

// Finishes each batch at once, inside Finish, and records what it saw.
class InlineFinisher final : public BatchFinisher {
 public:
  absl::Status Attach(SlotArena& arena, const BatchLayout& layout) override {
    std::lock_guard<std::mutex> l(mu_);
    ++attaches;
    memory = arena.memory();
    sample_bytes = layout.sample_bytes;
    return absl::OkStatus();
  }
  void Finish(const BatchInfo& batch, absl::AnyInvocable<void(absl::Status) &&> done) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      finished.push_back(batch.sequence);
    }
    std::move(done)(absl::OkStatus());
  }
  void Drain() override {}

  std::vector<uint64_t> Finished() {
    std::lock_guard<std::mutex> l(mu_);
    return finished;
  }

  std::mutex mu_;
  int attaches = 0;
  SlotMemory memory = SlotMemory::kPrivate;
  size_t sample_bytes = 0;
  std::vector<uint64_t> finished;
};

// INLINE, with pinned slots, uint8 host samples and a finisher.
class FinishingInline final : public Transport {
 public:
  explicit FinishingInline(absl::Status make_status) : make_status_(std::move(make_status)) {}
  v1::Transport kind() const override { return v1::INLINE; }
  absl::Status CanServe(const v1::OpenStream&, const ClientIdentity&) const override {
    return absl::OkStatus();
  }
  SlotMemory slot_memory() const override { return SlotMemory::kPinnedMemfd; }
  bool collate_uint8() const override { return true; }
  absl::StatusOr<std::shared_ptr<BatchFinisher>> MakeFinisher(
      const v1::OpenStream& request, const PipelineConfig& pipeline) const override {
    made_for_ = pipeline.name + "/" + ToString(pipeline.transform.dtype);
    if (!make_status_.ok()) return make_status_;
    return std::shared_ptr<BatchFinisher>(finisher);
  }
  absl::StatusOr<std::unique_ptr<StreamTransport>> Open(const std::shared_ptr<Stream>& stream,
                                                        std::function<void()> wake) override {
    return inline_.Open(stream, std::move(wake));
  }

  const std::shared_ptr<InlineFinisher> finisher = std::make_shared<InlineFinisher>();
  mutable std::string made_for_;

 private:
  const absl::Status make_status_;
  InlineTransport inline_{64ull << 20};
};

struct Fixture {
  explicit Fixture(absl::Status make_status = absl::OkStatus()) {
    testing::MakeImageFolder(dir.path(), 2, 3);  // 6 samples
    auto p = testing::MakePipeline(dir.path(), 32);
    p->transform.dtype = DType::kFloat32;
    REQUIRE(ValidatePipelineConfig(*p).ok());
    auto owned = std::make_unique<FinishingInline>(std::move(make_status));
    transport = owned.get();
    std::vector<std::unique_ptr<Transport>> transports;
    transports.push_back(std::move(owned));
    ServiceOptions so;
    so.memory_budget = 64ull << 20;
    auto created = ConveyorService::Create(so, {p}, testing::MakeEngine(2),
                                           std::make_unique<TransportSet>(std::move(transports)));
    REQUIRE(created.ok());
    service = *std::move(created);
  }
  ~Fixture() { service->BeginShutdown(); }

  testing::TempDir dir;
  FinishingInline* transport = nullptr;  // owned by the service
  std::unique_ptr<ConveyorService> service;
};

v1::OpenStream Request() {
  v1::OpenStream r;
  r.set_pipeline("test");
  r.set_batch_size(2);
  r.set_credits(2);
  r.set_num_epochs(1);
  r.set_shuffle(false);
  r.set_transport(v1::INLINE);
  return r;
}

const ClientIdentity kPeer = ClientIdentity::FromPeer("ipv4:10.0.0.1:4000");

TEST_CASE("service: a transport's memory kind, collate_uint8 and finisher reach the stream",
          "[service][finisher]") {
  Fixture t;
  auto session = t.service->OpenStream(Request(), kPeer);
  REQUIRE(session.ok());
  Stream& s = (*session)->stream();
  CHECK(t.transport->made_for_ == "test/float32");
  CHECK(s.options().memory == SlotMemory::kPinnedMemfd);
  CHECK(s.arena().memory() == SlotMemory::kPinnedMemfd);
  CHECK(s.arena().fd() >= 0);
  CHECK(s.options().collate_uint8);
  CHECK(s.layout().sample_bytes == 3u * 32 * 32);  // uint8 on the host, not float32
  InlineFinisher& f = *t.transport->finisher;
  CHECK(f.attaches == 1);
  CHECK(f.memory == SlotMemory::kPinnedMemfd);
  CHECK(f.sample_bytes == s.layout().sample_bytes);

  const testing::Collected c = testing::Drain(s);
  REQUIRE(c.end.ok());
  REQUIRE(c.batches.size() == 3);
  CHECK(f.Finished() == std::vector<uint64_t>{0, 1, 2});
  session->reset();
  CHECK(t.service->GetStats().slot_bytes_in_use() == 0);
}

TEST_CASE("service: a MakeFinisher error refuses the stream with it, holding no budget",
          "[service][finisher]") {
  Fixture t(absl::FailedPreconditionError("no CUDA device: the driver is not loaded"));
  auto session = t.service->OpenStream(Request(), kPeer);
  REQUIRE(!session.ok());
  CHECK(absl::IsFailedPrecondition(session.status()));
  CHECK(session.status().message() == "no CUDA device: the driver is not loaded");
  CHECK(t.transport->finisher->attaches == 0);
  CHECK(t.service->GetStats().streams_open() == 0);
  CHECK(t.service->GetStats().slot_bytes_in_use() == 0);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
