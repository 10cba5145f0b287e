// Tests of the DEVICE_MEMORY transport (server/transport/device/) through
// the service, with the host model of the device API
// (core/gpu/host_device_api.h), whose copies and conversions run later on a
// thread of its own: a batch is delivered only once its bytes are on the
// "device"; those bytes equal the daemon's host float32 / float16 output of
// the same stream bit for bit (read through the ring fd the client fetches);
// a ring slot is rewritten only after the client released it; a stream
// cancelled or closed mid-copy, or a daemon shut down with copies
// outstanding, frees every allocation, registration and budget byte; the
// refusals (budget, unknown UUID, no GPU, no UUID, TCP client, AUTO) name
// why. Compiled only with the server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/gpu/device_api.h"
#include "core/gpu/host_device_api.h"
#include "server/flags.h"
#include "server/service/batch_message.h"
#include "server/service/service.h"
#include "server/transport/device/device_transport.h"
#include "server/transport/device/gpu_budget.h"
#include "server/transport/inline.h"
#include "server/transport/shm.h"
#include "tests/unit/eventually.h"
#include "tests/unit/test_images.h"

namespace conveyor::server {
namespace {

using testing::Eventually;

const ClientIdentity kUnix = ClientIdentity::FromPeer("unix:/run/conveyor/test.sock");
const ClientIdentity kTcp = ClientIdentity::FromPeer("ipv4:10.0.0.1:4000");
constexpr char kUuid[] = "GPU-8c5b0c1e-6f1d-4a2b-9c3d-0123456789ab";
constexpr char kOtherUuid[] = "GPU-00000000-1111-2222-3333-444444444444";

gpu::DeviceInfo TestGpu(const std::string& uuid, const std::string& name, uint64_t total) {
  gpu::DeviceInfo d;
  d.uuid = uuid;
  d.name = name;
  d.total_bytes = total;
  return d;
}

struct DeviceFixtureOptions {
  absl::Duration op_delay = absl::ZeroDuration();
  uint64_t gpu_memory_budget = 0;  // 0: a quarter of the GPU's 1 GiB
  bool built_api = false;  // the build's gpu::MakeDeviceApi() (CUDA or none), not the host model
};

// A service over a small ImageFolder (2 classes × 3 images, 32 px), its
// pipelines "u8" (uint8 NCHW), "f32" (float32 NCHW) and "f16" (float16
// NHWC), with the shared-memory, inline and device transports.
struct DeviceFixture {
  explicit DeviceFixture(DeviceFixtureOptions o = {}) {
    testing::MakeImageFolder(dir.Sub("images"), 2, 3, 48, 40);
    auto index = DatasetIndex::LoadImageFolder(dir.Sub("images"));
    REQUIRE(index.ok());
    auto pipeline = [&](const std::string& name, DType dtype, Layout layout) {
      auto p = std::make_shared<PipelineConfig>();
      p->name = name;
      p->dataset = *index;
      p->transform.output_height = p->transform.output_width = 32;
      p->transform.mode = AugmentMode::kEval;
      p->transform.dtype = dtype;
      p->transform.layout = layout;
      REQUIRE(ValidatePipelineConfig(*p).ok());
      return std::shared_ptr<const PipelineConfig>(p);
    };
    EngineOptions eo;
    eo.num_threads = 2;
    auto engine = Engine::Create(eo);
    REQUIRE(engine.ok());
    if (o.built_api) {
      api = gpu::MakeDeviceApi();
    } else {
      gpu::HostDeviceApi::Options ho;
      ho.op_delay = o.op_delay;
      auto h = std::make_shared<gpu::HostDeviceApi>(
          std::vector<gpu::DeviceInfo>{TestGpu(kUuid, "Test GPU", 1ull << 30),
                                       TestGpu(kOtherUuid, "Other GPU", 1ull << 30)},
          ho);
      host = h.get();
      api = std::move(h);
    }
    budget = GpuBudget::Create(o.gpu_memory_budget);
    const std::string fd_path = dir.Sub("conveyor.sock.fd");
    auto shm_owned = std::make_unique<ShmTransport>(fd_path);
    shm = shm_owned.get();
    auto device_owned = std::make_unique<DeviceTransport>(api, budget, fd_path);
    device = device_owned.get();
    std::vector<std::unique_ptr<Transport>> transports;
    transports.push_back(std::move(shm_owned));
    transports.push_back(std::make_unique<InlineTransport>(64ull << 20));
    transports.push_back(std::move(device_owned));
    ServiceOptions so;
    so.memory_budget = 256ull << 20;
    so.max_streams = 64;
    auto created = ConveyorService::Create(so,
                                           {pipeline("u8", DType::kUint8, Layout::kNCHW),
                                            pipeline("f32", DType::kFloat32, Layout::kNCHW),
                                            pipeline("f16", DType::kFloat16, Layout::kNHWC)},
                                           *std::move(engine),
                                           std::make_unique<TransportSet>(std::move(transports)));
    REQUIRE(created.ok());
    service = *std::move(created);
  }
  ~DeviceFixture() {
    if (host != nullptr) host->Hold(false);
    if (service != nullptr) service->BeginShutdown();
  }

  absl::StatusOr<std::unique_ptr<Session>> Open(const v1::OpenStream& r,
                                                const ClientIdentity& client = kUnix) {
    return service->OpenStream(r, client, nullptr, nullptr);
  }

  testing::TempDir dir;
  std::shared_ptr<gpu::DeviceApi> api;
  gpu::HostDeviceApi* host = nullptr;  // api, when it is the host model
  std::shared_ptr<GpuBudget> budget;
  ShmTransport* shm = nullptr;        // owned by the service
  DeviceTransport* device = nullptr;  // owned by the service
  std::unique_ptr<ConveyorService> service;
};

v1::OpenStream Request(const std::string& pipeline, v1::Transport transport,
                       const std::string& uuid = kUuid, uint32_t credits = 2) {
  v1::OpenStream r;
  r.set_pipeline(pipeline);
  r.set_batch_size(2);
  r.set_credits(credits);
  r.set_num_epochs(1);
  r.set_shuffle(false);
  r.set_seed(7);
  r.set_transport(transport);
  if (transport == v1::DEVICE_MEMORY) r.mutable_device()->set_gpu_uuid(uuid);
  return r;
}

// The next batch of `session` with its message (header and transport's part).
struct Delivered {
  BatchInfo info;
  v1::Batch message;
};
Delivered Next(Session& session) {
  absl::StatusOr<std::optional<BatchInfo>> b = session.stream().Next(absl::Seconds(30));
  INFO(b.status().ToString());
  REQUIRE(b.ok());
  REQUIRE(b->has_value());
  Delivered d{**b, {}};
  FillBatchHeader(d.info, session.stream(), &d.message);
  session.transport().Deliver(d.info, &d.message);
  return d;
}

// The images of a SHARED_MEMORY batch, from the stream's slot.
std::vector<uint8_t> HostImages(Session& session, const Delivered& d) {
  const uint8_t* p =
      session.stream().arena().slot(d.info.slot) + session.stream().layout().images_offset;
  return std::vector<uint8_t>(p, p + d.message.images_bytes());
}

Secret SecretOf(const v1::DeviceMemoryOpened& opened) {
  Secret s{};
  REQUIRE(opened.secret().size() == s.size());
  std::memcpy(s.data(), opened.secret().data(), s.size());
  return s;
}

// The device ring of a DEVICE_MEMORY stream as its client maps it: the fd
// from the hand-over, mmap'ed (the host model's ring is a memfd).
class MappedRing {
 public:
  MappedRing(DeviceTransport& transport, const Session& session) {
    const v1::DeviceMemoryOpened& d = session.opened().device_memory();
    REQUIRE(d.host_model());
    absl::StatusOr<UniqueFd> fd = transport.RegionFd(session.id(), SecretOf(d));
    INFO(fd.status().ToString());
    REQUIRE(fd.ok());
    bytes_ = d.region_bytes();
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED, fd->get(), 0);
    REQUIRE(p != MAP_FAILED);
    base_ = static_cast<const uint8_t*>(p);
  }
  ~MappedRing() { ::munmap(const_cast<uint8_t*>(base_), bytes_); }
  std::vector<uint8_t> Images(const v1::Batch& b) const {
    REQUIRE(b.images_offset() + b.images_bytes() <= bytes_);
    return std::vector<uint8_t>(base_ + b.images_offset(),
                                base_ + b.images_offset() + b.images_bytes());
  }

 private:
  const uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
};

TEST_CASE("device batches equal the host path's float output bit for bit", "[device_transport]") {
  // Each copy and conversion takes a while: a batch handed out before its
  // copy completed would show other bytes than the host path's.
  DeviceFixture f({.op_delay = absl::Milliseconds(20)});
  for (const char* pipeline : {"f32", "f16", "u8"}) {
    INFO("pipeline " << pipeline);
    absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request(pipeline, v1::DEVICE_MEMORY));
    INFO(dev.status().ToString());
    REQUIRE(dev.ok());
    absl::StatusOr<std::unique_ptr<Session>> host = f.Open(Request(pipeline, v1::SHARED_MEMORY));
    REQUIRE(host.ok());
    const v1::DeviceMemoryOpened& opened = (*dev)->opened().device_memory();
    CHECK((*dev)->opened().transport() == v1::DEVICE_MEMORY);
    CHECK(opened.gpu_uuid() == kUuid);
    CHECK(opened.num_slots() == 2);
    CHECK(opened.slot_bytes() % DeviceFinisher::kRingAlignment == 0);
    CHECK(opened.region_bytes() >= uint64_t{opened.slot_bytes()} * opened.num_slots());
    MappedRing ring(*f.device, **dev);
    for (int k = 0; k < 3; ++k) {
      INFO("batch " << k);
      const Delivered d = Next(**dev);
      // Read at once: the batch is out, so its bytes must be there.
      const std::vector<uint8_t> on_device = ring.Images(d.message);
      const Delivered h = Next(**host);
      CHECK(d.message.dtype() == h.message.dtype());
      CHECK(d.message.images_bytes() == h.message.images_bytes());
      CHECK(std::vector<int64_t>(d.message.shape().begin(), d.message.shape().end()) ==
            std::vector<int64_t>(h.message.shape().begin(), h.message.shape().end()));
      CHECK(d.message.images_offset() == uint64_t{d.info.slot} * opened.slot_bytes());
      CHECK(std::vector<int64_t>(d.message.labels().begin(), d.message.labels().end()) ==
            std::vector<int64_t>(h.message.labels().begin(), h.message.labels().end()));
      CHECK(on_device == HostImages(**host, h));
      REQUIRE((*dev)->stream().Release(d.info.slot).ok());
      REQUIRE((*host)->stream().Release(h.info.slot).ok());
    }
  }
  // Float pipelines cross PCIe as uint8: the host slots hold a quarter (or half) the bytes.
}

TEST_CASE("a device batch is not handed out before the device ran its copy", "[device_transport]") {
  DeviceFixture f;
  f.host->Hold(true);  // the model's queues start nothing
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(dev.ok());
  BatchInfo b;
  absl::Status error;
  // Collated and handed to the finisher (the deliver stage's in_flight),
  // whose copy cannot run.
  auto finishing = [&] {
    for (const StageStats& st : (*dev)->stream().Stats().stages) {
      if (st.name == "deliver" && st.in_flight > 0) return true;
    }
    return false;
  };
  REQUIRE(Eventually(finishing));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(f.host->ops_run() == 0);
  CHECK((*dev)->stream().TryNext(&b, &error) == Stream::Poll::kNotReady);
  f.host->Hold(false);
  const Delivered d = Next(**dev);
  CHECK(d.info.sequence == 0);
  CHECK(f.host->ops_run() >= 2);  // the copy and the conversion of batch 0
}

TEST_CASE("a ring slot is written again only after its release", "[device_transport]") {
  DeviceFixture f;
  // 6 images, batches of 2, 2 credits: batch 2 needs a slot back.
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(dev.ok());
  absl::StatusOr<std::unique_ptr<Session>> host = f.Open(Request("f32", v1::SHARED_MEMORY, "", 4));
  REQUIRE(host.ok());
  std::vector<std::vector<uint8_t>> want;
  for (int k = 0; k < 3; ++k) want.push_back(HostImages(**host, Next(**host)));
  MappedRing ring(*f.device, **dev);
  const Delivered d0 = Next(**dev);
  const Delivered d1 = Next(**dev);
  CHECK(d0.info.slot != d1.info.slot);
  const uint64_t ops = f.host->ops_run();
  // Both slots held: nothing may be copied into the ring, whatever time passes.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(f.host->ops_run() == ops);
  CHECK(ring.Images(d0.message) == want[0]);
  CHECK(ring.Images(d1.message) == want[1]);
  REQUIRE((*dev)->stream().Release(d0.info.slot).ok());
  const Delivered d2 = Next(**dev);
  CHECK(d2.info.slot == d0.info.slot);
  CHECK(ring.Images(d2.message) == want[2]);
  CHECK(ring.Images(d1.message) == want[1]);  // still held, untouched
}

TEST_CASE("a device stream closed or cancelled mid-copy frees its device memory",
          "[device_transport]") {
  DeviceFixture f;
  const bool cancel_first = GENERATE(false, true);
  INFO((cancel_first ? "cancelled, then closed" : "closed (client gone)"));
  f.host->Hold(true);
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(dev.ok());
  CHECK(f.host->allocations() == 2);  // ring and staging
  CHECK(f.host->registrations() == 1);
  CHECK(f.budget->InUse(kUuid) == (4ull << 20));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // copies queued, held
  if (cancel_first) (*dev)->stream().Cancel(absl::CancelledError("client went away"));
  dev->reset();  // the session goes as when the client died
  CHECK(Eventually([&] {
    return f.host->allocations() == 0 && f.host->registrations() == 0 &&
           f.budget->InUse(kUuid) == 0 && f.service->GetStats().streams_open() == 0;
  }));
  CHECK(f.host->bytes_in_use(kUuid) == 0);
  // The GPU serves the next stream.
  f.host->Hold(false);
  absl::StatusOr<std::unique_ptr<Session>> again = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(again.ok());
  CHECK(Next(**again).info.sequence == 0);
}

TEST_CASE("a daemon shutting down with device copies outstanding frees everything",
          "[device_transport]") {
  DeviceFixture f;
  f.host->Hold(true);
  std::vector<std::unique_ptr<Session>> sessions;
  for (const char* p : {"f32", "f16", "u8"}) {
    absl::StatusOr<std::unique_ptr<Session>> s = f.Open(Request(p, v1::DEVICE_MEMORY));
    REQUIRE(s.ok());
    sessions.push_back(*std::move(s));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // As the daemon does: cancel every stream, the calls end, the service goes.
  f.service->BeginShutdown();
  sessions.clear();
  f.service.reset();
  CHECK(f.host->allocations() == 0);
  CHECK(f.host->registrations() == 0);
  CHECK(f.budget->InUse(kUuid) == 0);
}

TEST_CASE("a device error ends the stream with it", "[device_transport]") {
  DeviceFixture f;
  f.host->FailNextOp(absl::InternalError("injected device fault"));
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(dev.ok());
  absl::StatusOr<std::optional<BatchInfo>> b = (*dev)->stream().Next(absl::Seconds(30));
  REQUIRE_FALSE(b.ok());
  CHECK_THAT(std::string(b.status().message()), Catch::Contains("injected device fault"));
  dev->reset();
  CHECK(Eventually([&] { return f.host->allocations() == 0 && f.budget->InUse(kUuid) == 0; }));
}

TEST_CASE("the finisher copies float32 host samples as they are, and nothing after Drain",
          "[device_transport]") {
  // What an audio pipeline's stream does: its samples are float32 on the
  // host already (no collate_uint8), so the ring gets them byte for byte.
  auto host = std::make_shared<gpu::HostDeviceApi>(
      std::vector<gpu::DeviceInfo>{TestGpu(kUuid, "Test GPU", 1ull << 30)});
  std::shared_ptr<GpuBudget> budget = GpuBudget::Create(0);
  TransformSpec t;
  t.output_height = t.output_width = 8;
  t.dtype = DType::kFloat32;
  const BatchLayout layout = BatchLayout::For(t, 2);
  absl::StatusOr<std::unique_ptr<SlotArena>> arena =
      SlotArena::Create(2, layout.slot_bytes, SlotMemory::kDevice, "device-test");
  REQUIRE(arena.ok());
  gpu::DeviceInfo gpu0 = TestGpu(kUuid, "Test GPU", 1ull << 30);
  auto finisher = std::make_shared<DeviceFinisher>(host, gpu0, budget, t);
  REQUIRE(finisher->Attach(**arena, layout).ok());
  CHECK_FALSE(finisher->converts());
  CHECK(host->registrations() == 1);
  uint8_t* images = (*arena)->slot(1) + layout.images_offset;
  for (size_t i = 0; i < 2 * layout.sample_bytes; ++i) images[i] = static_cast<uint8_t>(i * 7);
  BatchInfo b;
  b.slot = 1;
  b.num_samples = 2;
  std::atomic<int> done{0};
  absl::Status seen;
  finisher->Finish(b, [&](absl::Status st) {
    seen = st;
    done.fetch_add(1);
  });
  REQUIRE(Eventually([&] { return done.load() == 1; }));
  CHECK(seen.ok());
  absl::StatusOr<std::vector<uint8_t>> on_device = host->ReadDevice(
      finisher->ring_address() + finisher->ring_slot_bytes(), 2 * layout.sample_bytes);
  REQUIRE(on_device.ok());
  CHECK(*on_device == std::vector<uint8_t>(images, images + 2 * layout.sample_bytes));
  finisher->Drain();
  CHECK(host->allocations() == 0);
  CHECK(host->registrations() == 0);
  CHECK(budget->InUse(kUuid) == 0);
  CHECK(absl::IsFailedPrecondition(finisher->ExportRingFd().status()));
  finisher->Finish(b, [&](absl::Status st) {
    seen = st;
    done.fetch_add(1);
  });
  CHECK(done.load() == 2);
  CHECK(absl::IsFailedPrecondition(seen));

  // Host samples of a size the pipeline's dtype cannot come from: refused.
  BatchLayout odd = layout;
  odd.sample_bytes += 1;
  auto refused = std::make_shared<DeviceFinisher>(host, gpu0, budget, t);
  CHECK(refused->Attach(**arena, odd).code() == absl::StatusCode::kInternal);
  CHECK(host->allocations() == 0);
}

TEST_CASE("a device stream over the GPU's budget is refused naming the GPU and the figures",
          "[device_transport]") {
  // One f32 stream: a ring and a staging buffer of one 2 MiB granule each.
  DeviceFixture f({.gpu_memory_budget = 4ull << 20});
  absl::StatusOr<std::unique_ptr<Session>> first = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE(first.ok());
  CHECK(f.budget->InUse(kUuid) == (4ull << 20));
  absl::StatusOr<std::unique_ptr<Session>> second = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE_FALSE(second.ok());
  CHECK(second.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string m(second.status().message());
  INFO(m);
  CHECK_THAT(m, Catch::Contains(kUuid) && Catch::Contains("Test GPU") &&
                    Catch::Contains("4.0 MiB gpu_memory_budget") &&
                    Catch::Contains("1 stream(s) hold 4.0 MiB"));
  CHECK(f.host->allocations() == 2);  // the refused stream allocated nothing
  // Nothing of the refused stream stays reserved (slot memory included).
  CHECK(f.service->GetStats().streams_open() == 1);
  // The other GPU has its own budget.
  CHECK(f.Open(Request("f32", v1::DEVICE_MEMORY, kOtherUuid)).ok());
  first->reset();
  CHECK(Eventually([&] { return f.budget->InUse(kUuid) == 0; }));
  CHECK(f.Open(Request("f32", v1::DEVICE_MEMORY)).ok());
}

TEST_CASE("an unknown GPU UUID is refused listing the GPUs there are; host streams go on",
          "[device_transport]") {
  DeviceFixture f;
  absl::StatusOr<std::unique_ptr<Session>> dev =
      f.Open(Request("f32", v1::DEVICE_MEMORY, "GPU-deadbeef-0000-0000-0000-000000000000"));
  REQUIRE_FALSE(dev.ok());
  CHECK(dev.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string m(dev.status().message());
  INFO(m);
  CHECK_THAT(m, Catch::Contains("GPU-deadbeef-0000-0000-0000-000000000000") &&
                    Catch::Contains(kUuid) && Catch::Contains(kOtherUuid));
  CHECK(f.host->allocations() == 0);
  // By UUID in any case, with or without the prefix.
  std::string lower = std::string(kUuid).substr(4);
  CHECK(f.Open(Request("u8", v1::DEVICE_MEMORY, lower)).ok());
  absl::StatusOr<std::unique_ptr<Session>> host = f.Open(Request("f32", v1::SHARED_MEMORY));
  REQUIRE(host.ok());
  CHECK(Next(**host).info.sequence == 0);
}

TEST_CASE("without a GPU a device stream ends FAILED_PRECONDITION saying why; host streams go on",
          "[device_transport]") {
  DeviceFixture f({.built_api = true});
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("f32", v1::DEVICE_MEMORY));
  REQUIRE_FALSE(dev.ok());
  CHECK(dev.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string m(dev.status().message());
  INFO(m);
  CHECK_THAT(m, Catch::Contains(kUuid) && Catch::Contains("DEVICE_MEMORY"));
  absl::StatusOr<std::vector<gpu::DeviceInfo>> devices = f.api->Devices();
  if (!devices.ok()) {
    // The device API's own reason (no driver, no device, built without CUDA).
    CHECK_THAT(m, Catch::Contains(std::string(devices.status().message())));
  } else {
    // A host with GPUs (none of this made-up UUID): the ones there are.
    REQUIRE_FALSE(devices->empty());
    CHECK_THAT(m, Catch::Contains(devices->front().uuid));
  }
  absl::StatusOr<std::unique_ptr<Session>> host = f.Open(Request("u8", v1::SHARED_MEMORY));
  REQUIRE(host.ok());
  CHECK(Next(**host).info.sequence == 0);
}

TEST_CASE("DEVICE_MEMORY needs a GPU UUID and the unix socket, and AUTO never picks it",
          "[device_transport]") {
  DeviceFixture f;
  absl::StatusOr<std::unique_ptr<Session>> no_uuid = f.Open(Request("f32", v1::DEVICE_MEMORY, ""));
  REQUIRE_FALSE(no_uuid.ok());
  CHECK(no_uuid.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(no_uuid.status().message()), Catch::Contains("device.gpu_uuid"));
  absl::StatusOr<std::unique_ptr<Session>> tcp = f.Open(Request("f32", v1::DEVICE_MEMORY), kTcp);
  REQUIRE_FALSE(tcp.ok());
  CHECK(tcp.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(tcp.status().message()), Catch::Contains("unix socket"));
  v1::OpenStream auto_req = Request("f32", v1::TRANSPORT_AUTO);
  auto_req.mutable_device()->set_gpu_uuid(kUuid);
  absl::StatusOr<std::unique_ptr<Session>> picked = f.Open(auto_req);
  REQUIRE(picked.ok());
  CHECK((*picked)->opened().transport() == v1::SHARED_MEMORY);
  CHECK(f.host->allocations() == 0);
}

TEST_CASE("the ring fd goes only with the stream's secret", "[device_transport]") {
  DeviceFixture f;
  absl::StatusOr<std::unique_ptr<Session>> dev = f.Open(Request("u8", v1::DEVICE_MEMORY));
  REQUIRE(dev.ok());
  CHECK(f.device->Serves((*dev)->id()));
  Secret wrong = SecretOf((*dev)->opened().device_memory());
  wrong[0] ^= 1;
  CHECK(absl::IsPermissionDenied(f.device->RegionFd((*dev)->id(), wrong).status()));
  CHECK(absl::IsPermissionDenied(
      f.device->RegionFd((*dev)->id() + 1000, SecretOf((*dev)->opened().device_memory()))
          .status()));
  const uint64_t id = (*dev)->id();
  dev->reset();
  CHECK_FALSE(f.device->Serves(id));
}

TEST_CASE("the GPU budget's figures", "[device_transport]") {
  std::shared_ptr<GpuBudget> b = GpuBudget::Create(0);
  const gpu::DeviceInfo g = TestGpu(kUuid, "Test GPU", 8ull << 30);
  CHECK(b->LimitOf(g) == (2ull << 30));  // a quarter of the GPU by default
  auto r1 = b->Reserve(g, 1ull << 30);
  REQUIRE(r1.ok());
  auto r2 = b->Reserve(g, (1ull << 30) + 1);
  REQUIRE_FALSE(r2.ok());
  CHECK_THAT(std::string(r2.status().message()),
             Catch::Contains("1.0 GiB of the GPU's 2.0 GiB gpu_memory_budget is free"));
  CHECK(b->Holders(kUuid) == 1);
  r1->reset();
  CHECK(b->InUse(kUuid) == 0);
  CHECK(b->Reserve(g, 2ull << 30).ok());
  CHECK(GpuBudget::Create(1ull << 20)->LimitOf(g) == (1ull << 20));
}

TEST_CASE("flags: --device-api host-model and --host-model-gpus", "[device_transport]") {
  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "conveyord");
    return ParseFlags(static_cast<int>(args.size()), args.data());
  };
  absl::StatusOr<Flags> f =
      parse({"--device-api", "host-model", "--host-model-gpus", "GPU-aaaa:16GiB,GPU-bbbb:512MiB"});
  REQUIRE(f.ok());
  CHECK(f->device_api == "host-model");
  REQUIRE(f->host_model_gpus.size() == 2);
  CHECK(f->host_model_gpus[0].uuid == "GPU-aaaa");
  CHECK(f->host_model_gpus[0].total_bytes == (16ull << 30));
  CHECK(f->host_model_gpus[1].ordinal == 1);
  CHECK(f->host_model_gpus[1].total_bytes == (512ull << 20));
  CHECK(parse({}).ok());
  CHECK(parse({})->device_api == "cuda");
  auto refused = [&](std::vector<const char*> args, const std::string& why) {
    absl::StatusOr<Flags> r = parse(std::move(args));
    INFO(r.status().ToString());
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(why));
  };
  refused({"--device-api", "opencl"}, "expected cuda or host-model");
  refused({"--device-api", "host-model"}, "needs --host-model-gpus");
  refused({"--host-model-gpus", "GPU-aaaa:1GiB"}, "needs --device-api host-model");
  refused({"--device-api=host-model", "--host-model-gpus=GPU-aaaa"}, "expected UUID:BYTES");
  refused({"--device-api=host-model", "--host-model-gpus=GPU-aaaa:lots"}, "GPU-aaaa");
  refused({"--device-api=host-model", "--host-model-gpus=GPU-a:1GiB,GPU-a:2GiB"}, "twice");
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
