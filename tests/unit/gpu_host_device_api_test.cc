// core/gpu/host_device_api.h: the host model of the device API — work runs
// later on a thread of the model in queue order, completions after it (also
// when the queue is destroyed first); unregistered host memory is refused;
// device ranges are bounds-checked; the per-GPU memory limit; ExportFd maps
// the same bytes; Find by UUID; the injected failure; "none".
#include "core/gpu/host_device_api.h"

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "core/gpu/convert.h"
#include "core/gpu/none_device_api.h"

namespace conveyor::gpu {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

DeviceInfo Gpu(const std::string& uuid, uint64_t total, int ordinal = 0) {
  return DeviceInfo{uuid, ordinal, "Model GPU", total};
}

const std::string kUuid0 = "GPU-8c5b0c1e-6f1d-4a6e-9b2f-0123456789ab";
const std::string kUuid1 = "GPU-11111111-2222-3333-4444-555555555555";

template <typename T>
T Ok(absl::StatusOr<T> v) {
  INFO(v.status().ToString());
  REQUIRE(v.ok());
  return std::move(*v);
}

// Page-aligned host memory, as the daemon's slots are.
struct HostBuffer {
  explicit HostBuffer(size_t n) : bytes(n) {
    p = static_cast<uint8_t*>(
        ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(p != MAP_FAILED);
  }
  ~HostBuffer() { ::munmap(p, bytes); }
  uint8_t* p;
  size_t bytes;
};

}  // namespace

TEST_CASE("gpu host model: work and completions run later, on the model's thread, in order",
          "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 4096));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(8192);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  std::memset(host.p, 'a', 4096);
  std::memset(host.p + 4096, 'b', 4096);

  api.Hold(true);
  std::mutex mu;
  std::vector<std::string> seen;  // the first device byte each completion saw
  std::vector<std::thread::id> threads;
  std::promise<void> all_done;
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
  // (Catch's assertions are not thread-safe: the callbacks only record.)
  auto record = [&](absl::Status s) {
    const auto dev = api.ReadDevice(alloc->device_address(), 4096);
    std::lock_guard<std::mutex> l(mu);
    if (!s.ok() || !dev.ok()) {
      seen.push_back("error: " + s.ToString() + " " + dev.status().ToString());
    } else {
      seen.push_back(std::string(1, static_cast<char>((*dev)[0])) +
                     std::string(1, static_cast<char>((*dev)[4095])));
    }
    threads.push_back(std::this_thread::get_id());
  };
  REQUIRE(queue->OnComplete([&](absl::Status s) { record(s); }).ok());
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p + 4096, 4096).ok());
  REQUIRE(queue
              ->OnComplete([&](absl::Status s) {
                record(s);
                all_done.set_value();
              })
              .ok());
  // Nothing ran inside the calls: the device still holds zeros.
  {
    std::lock_guard<std::mutex> l(mu);
    REQUIRE(seen.empty());
  }
  REQUIRE(Ok(api.ReadDevice(alloc->device_address(), 1))[0] == 0);
  REQUIRE(api.ops_run() == 0);
  api.Hold(false);
  all_done.get_future().wait();
  std::lock_guard<std::mutex> l(mu);
  REQUIRE(seen == std::vector<std::string>{"aa", "bb"});
  REQUIRE(threads.size() == 2);
  REQUIRE(threads[0] != std::this_thread::get_id());
  REQUIRE(threads[0] == threads[1]);
  REQUIRE(api.ops_run() == 2);
}

TEST_CASE("gpu host model: a completion never runs before the delayed copy", "[gpu][host_model]") {
  HostDeviceApi::Options options;
  options.op_delay = absl::Milliseconds(30);
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)}, options);
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, kMiB));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(kMiB);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  std::memset(host.p, 7, kMiB);
  std::atomic<bool> done{false};
  std::promise<absl::StatusOr<std::vector<uint8_t>>> last_byte;
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, kMiB).ok());
  REQUIRE(queue
              ->OnComplete([&](absl::Status s) {
                done = true;
                if (!s.ok()) {
                  last_byte.set_value(s);
                } else {
                  last_byte.set_value(api.ReadDevice(alloc->device_address() + kMiB - 1, 1));
                }
              })
              .ok());
  REQUIRE_FALSE(done.load());  // the copy takes at least 30 ms
  REQUIRE(Ok(last_byte.get_future().get())[0] == 7);
}

TEST_CASE("gpu host model: copies need registered host memory", "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 2 * kMiB));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(3 * 4096);
  const absl::Status unregistered = queue->CopyToDevice(alloc->device_address(), host.p, 4096);
  CHECK(absl::IsFailedPrecondition(unregistered));
  CHECK(unregistered.message().find("not registered") != std::string::npos);

  auto reg = Ok(api.RegisterHost(host.p, 2 * 4096));
  CHECK(api.registrations() == 1);
  CHECK(queue->CopyToDevice(alloc->device_address(), host.p, 2 * 4096).ok());
  CHECK(queue->CopyToDevice(alloc->device_address(), host.p + 4096, 4096).ok());
  // Running past the registered range, or registering an overlapping one.
  CHECK(absl::IsFailedPrecondition(
      queue->CopyToDevice(alloc->device_address(), host.p + 4096, 2 * 4096)));
  CHECK(absl::IsAlreadyExists(api.RegisterHost(host.p + 4096, 4096).status()));
  // Memory after a registered range is not in it.
  CHECK(absl::IsFailedPrecondition(
      queue->CopyToDevice(alloc->device_address(), host.p + 2 * 4096 + 64, 16)));
  CHECK(api.RegisterHost(host.p + 2 * 4096, 4096).ok());  // adjacent: fine (and dropped)
  CHECK(absl::IsInvalidArgument(api.RegisterHost(nullptr, 10).status()));

  // Unregistered after the copy was queued, before it ran: the copy fails.
  api.Hold(true);
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
  // The completion's code and message, copied out on the model's thread: a
  // Status copied across threads shares its payload, whose reference count
  // lives in Debian's uninstrumented abseil, so TSan would see the two
  // threads' frees of it as a race.
  std::promise<std::pair<absl::StatusCode, std::string>> result;
  REQUIRE(queue
              ->OnComplete([&](absl::Status s) {
                result.set_value({s.code(), std::string(s.message())});
              })
              .ok());
  reg.reset();
  CHECK(api.registrations() == 0);
  api.Hold(false);
  const auto [late_code, late_message] = result.get_future().get();
  CHECK(late_code == absl::StatusCode::kFailedPrecondition);
  CHECK(late_message.find("unregistered") != std::string::npos);
}

TEST_CASE("gpu host model: device ranges are bounds-checked", "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB), Gpu(kUuid1, 64 * kMiB, 1)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 100));
  REQUIRE(alloc->bytes() == HostDeviceApi::kGranularity);
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(HostDeviceApi::kGranularity + 4096);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  const uint64_t base = alloc->device_address();
  const uint64_t size = alloc->bytes();
  CHECK(queue->CopyToDevice(base + size - 16, host.p, 16).ok());
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(base + size - 16, host.p, 17)));
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(base, host.p, size + 1)));
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(base + size, host.p, 1)));
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(base + 8, host.p, ~uint64_t{0} - 4)));
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(0, host.p, 1)));
  CHECK(absl::IsOutOfRange(api.ReadDevice(base + size, 1).status()));
  CHECK(absl::IsOutOfRange(api.WriteDevice(base - 1, host.p, 1)));

  ConvertSpec spec;
  spec.dtype = DeviceDType::kFloat32;
  spec.elements = 3 * 1024;
  spec.plane = 1024;
  // float32 output needs 4 bytes per element: it does not fit at the end.
  CHECK(absl::IsOutOfRange(queue->Convert(base + size - 3 * 1024, base, spec)));
  CHECK(absl::IsInvalidArgument(queue->Convert(base + 100, base, spec)));  // overlap
  CHECK(queue->Convert(base + 3 * 1024, base, spec).ok());

  // Memory of another GPU on this GPU's queue; a freed allocation.
  auto other = Ok(api.Allocate(Ok(api.Find(kUuid1)), 100));
  CHECK(absl::IsInvalidArgument(queue->CopyToDevice(other->device_address(), host.p, 16)));
  const uint64_t gone = alloc->device_address();
  std::promise<void> drained;
  REQUIRE(queue->OnComplete([&](absl::Status) { drained.set_value(); }).ok());
  drained.get_future().wait();
  alloc.reset();
  CHECK(absl::IsOutOfRange(queue->CopyToDevice(gone, host.p, 16)));
  CHECK(absl::IsOutOfRange(api.ReadDevice(gone, 1).status()));
}

TEST_CASE("gpu host model: allocations beyond the GPU's memory are refused naming it",
          "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 8 * kMiB), Gpu(kUuid1, 64 * kMiB, 1)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto a = Ok(api.Allocate(gpu, 5 * kMiB + 1));  // rounds to 6 MiB
  CHECK(a->bytes() == 6 * kMiB);
  CHECK(api.bytes_in_use(kUuid0) == 6 * kMiB);
  const auto refused = api.Allocate(gpu, 3 * kMiB);
  REQUIRE(absl::IsResourceExhausted(refused.status()));
  CHECK(refused.status().message().find(kUuid0) != std::string::npos);
  CHECK(absl::IsResourceExhausted(api.Allocate(gpu, 9 * kMiB).status()));
  CHECK(absl::IsResourceExhausted(api.Allocate(gpu, ~uint64_t{0}).status()));
  CHECK(absl::IsInvalidArgument(api.Allocate(gpu, 0).status()));
  CHECK(absl::IsInvalidArgument(api.Allocate(Gpu("GPU-unknown", kMiB), 1).status()));
  // The other GPU has its own memory.
  auto b = Ok(api.Allocate(Ok(api.Find(kUuid1)), 32 * kMiB));
  CHECK(api.allocations() == 2);
  auto c = Ok(api.Allocate(gpu, 2 * kMiB));  // exactly full
  CHECK(api.bytes_in_use(kUuid0) == 8 * kMiB);
  a.reset();
  CHECK(api.bytes_in_use(kUuid0) == 2 * kMiB);
  auto d = Ok(api.Allocate(gpu, 6 * kMiB));
  CHECK(api.allocations() == 3);
}

TEST_CASE("gpu host model: ExportFd maps the allocation's bytes", "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 3 * kMiB));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(4096);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  for (int i = 0; i < 4096; ++i) host.p[i] = static_cast<uint8_t>(i * 31 + 5);
  const uint64_t at = alloc->device_address() + 2 * kMiB + 123;
  REQUIRE(queue->CopyToDevice(at, host.p, 4096).ok());
  std::promise<absl::Status> copied;
  REQUIRE(queue->OnComplete([&](absl::Status s) { copied.set_value(s); }).ok());
  REQUIRE(copied.get_future().get().ok());

  UniqueFd fd = Ok(alloc->ExportFd());
  REQUIRE(fd.valid());
  void* m = ::mmap(nullptr, alloc->bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  REQUIRE(m != MAP_FAILED);
  uint8_t* mapped = static_cast<uint8_t*>(m);
  CHECK(std::memcmp(mapped + 2 * kMiB + 123, host.p, 4096) == 0);
  // Writes through the mapping are the device's bytes, and the fd (like a
  // VMM handle an importer holds) keeps the memory after the allocation goes.
  mapped[0] = 0xEE;
  CHECK(Ok(api.ReadDevice(alloc->device_address(), 1))[0] == 0xEE);
  UniqueFd second = Ok(alloc->ExportFd());
  CHECK(second.get() != fd.get());
  alloc.reset();
  CHECK(api.allocations() == 0);
  CHECK(mapped[2 * kMiB + 123] == host.p[0]);
  ::munmap(m, 3 * kMiB);
}

TEST_CASE("gpu host model: destroying a queue runs its pending work and completions",
          "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 4096));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(4096);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  std::memset(host.p, 'z', 4096);
  api.Hold(true);
  std::vector<int> order;  // written by the model's thread, read after the join
  for (int i = 0; i < 3; ++i) {
    REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
    REQUIRE(
        queue->OnComplete([&order, i](absl::Status s) { order.push_back(s.ok() ? i : -1); }).ok());
  }
  CHECK(api.ops_run() == 0);
  queue.reset();  // held, yet the destruction runs everything queued
  CHECK(order == std::vector<int>{0, 1, 2});
  CHECK(api.ops_run() == 3);
  CHECK(Ok(api.ReadDevice(alloc->device_address(), 1))[0] == 'z');
  api.Hold(false);
}

TEST_CASE("gpu host model: queues and allocations outlive the api", "[gpu][host_model]") {
  auto api = std::make_unique<HostDeviceApi>(std::vector<DeviceInfo>{Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api->Find(kUuid0));
  auto alloc = Ok(api->Allocate(gpu, 4096));
  auto queue = Ok(api->CreateQueue(gpu));
  HostBuffer host(4096);
  auto reg = Ok(api->RegisterHost(host.p, host.bytes));
  api.reset();
  std::promise<absl::Status> copied;
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
  REQUIRE(queue->OnComplete([&](absl::Status s) { copied.set_value(s); }).ok());
  CHECK(copied.get_future().get().ok());
  CHECK(Ok(alloc->ExportFd()).valid());
}

TEST_CASE("gpu host model: an injected failure reaches the next completion only",
          "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 4096));
  auto queue = Ok(api.CreateQueue(gpu));
  HostBuffer host(4096);
  auto reg = Ok(api.RegisterHost(host.p, host.bytes));
  std::memset(host.p, 9, 4096);
  api.FailNextOp(absl::InternalError("injected: an illegal address"));
  // Code and message copied out on the model's thread (see "copies need
  // registered host memory" for why not the Status itself).
  std::promise<std::pair<absl::StatusCode, std::string>> first, second;
  const auto copy_out = [](std::promise<std::pair<absl::StatusCode, std::string>>* p) {
    return [p](absl::Status s) { p->set_value({s.code(), std::string(s.message())}); };
  };
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
  REQUIRE(queue->OnComplete(copy_out(&first)).ok());
  REQUIRE(queue->CopyToDevice(alloc->device_address(), host.p, 4096).ok());
  REQUIRE(queue->OnComplete(copy_out(&second)).ok());
  const auto [first_code, first_message] = first.get_future().get();
  CHECK(first_code == absl::StatusCode::kInternal);
  CHECK(first_message == "injected: an illegal address");
  CHECK(second.get_future().get().first == absl::StatusCode::kOk);
  CHECK(Ok(api.ReadDevice(alloc->device_address(), 1))[0] == 9);
  CHECK(absl::IsInvalidArgument(queue->OnComplete(nullptr)));
}

TEST_CASE("gpu host model: Convert runs the kernel's math on the device bytes",
          "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, 64 * kMiB)});
  const DeviceInfo gpu = Ok(api.Find(kUuid0));
  auto alloc = Ok(api.Allocate(gpu, 4 * kMiB));
  auto queue = Ok(api.CreateQueue(gpu));
  const uint64_t plane = 5 * 7;
  const uint64_t n = 2 * 3 * plane;  // two NCHW samples of 3 × 5 × 7
  std::vector<uint8_t> src(n);
  for (uint64_t i = 0; i < n; ++i) src[i] = static_cast<uint8_t>(i * 13 + 1);
  const uint64_t in = alloc->device_address();
  const uint64_t out = in + kMiB;
  REQUIRE(api.WriteDevice(in, src.data(), n).ok());
  for (const DeviceDType dtype :
       {DeviceDType::kFloat32, DeviceDType::kFloat16, DeviceDType::kBFloat16}) {
    for (const bool channels_last : {false, true}) {
      ConvertSpec spec;
      spec.dtype = dtype;
      spec.elements = n;
      spec.plane = plane;
      spec.channels_last = channels_last;
      REQUIRE(queue->Convert(out, in, spec).ok());
      std::promise<absl::Status> done;
      REQUIRE(queue->OnComplete([&](absl::Status s) { done.set_value(s); }).ok());
      REQUIRE(done.get_future().get().ok());
      const uint64_t size = dtype == DeviceDType::kFloat32 ? 4 : 2;
      const std::vector<uint8_t> got = Ok(api.ReadDevice(out, n * size));
      ConvertParams p;
      p.elements = n;
      p.plane = plane;
      p.channels_last = channels_last;
      for (uint64_t i = 0; i < n; ++i) {
        const uint32_t c = channels_last ? i % 3 : (i / plane) % 3;
        const float expect = (static_cast<float>(src[i]) / 255.0f - spec.mean[c]) / spec.std[c];
        if (dtype == DeviceDType::kFloat32) {
          float v;
          std::memcpy(&v, &got[i * 4], 4);
          REQUIRE(v == expect);
        } else {
          uint16_t v;
          std::memcpy(&v, &got[i * 2], 2);
          REQUIRE(v == (dtype == DeviceDType::kFloat16 ? HalfBits(expect) : BFloat16Bits(expect)));
        }
      }
    }
  }
  ConvertSpec bad;
  bad.channels = 7;
  CHECK(absl::IsInvalidArgument(queue->Convert(out, in, bad)));
}

TEST_CASE("gpu device api: Find by UUID", "[gpu][host_model]") {
  HostDeviceApi api({Gpu(kUuid0, kMiB), Gpu(kUuid1, kMiB, 1)});
  CHECK(Ok(api.Find(kUuid1)).ordinal == 1);
  CHECK(Ok(api.Find("gpu-8C5B0C1E-6F1D-4A6E-9B2F-0123456789AB")).uuid == kUuid0);
  CHECK(Ok(api.Find("11111111-2222-3333-4444-555555555555")).uuid == kUuid1);
  CHECK(Ok(api.Find("11111111-2222-3333-4444-555555555555")).name == "Model GPU");
  const auto unknown = api.Find("GPU-deadbeef-0000-0000-0000-000000000000");
  REQUIRE(absl::IsFailedPrecondition(unknown.status()));
  const std::string msg(unknown.status().message());
  CHECK(msg.find("GPU-deadbeef-0000-0000-0000-000000000000") != std::string::npos);
  CHECK(msg.find(kUuid0) != std::string::npos);
  CHECK(msg.find(kUuid1) != std::string::npos);
  CHECK(absl::IsFailedPrecondition(api.Find("").status()));
  CHECK(absl::IsFailedPrecondition(api.Find("GPU-").status()));

  HostDeviceApi empty({});
  CHECK(absl::IsFailedPrecondition(empty.Devices().status()));
  CHECK(absl::IsFailedPrecondition(empty.Find(kUuid0).status()));
}

TEST_CASE("gpu device api: UUIDs are formatted as nvidia-smi prints them", "[gpu]") {
  std::array<uint8_t, 16> b;
  for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(0x8c + 17 * i);
  CHECK(FormatGpuUuid(b) == "GPU-8c9daebf-d0e1-f203-1425-364758697a8b");
}

TEST_CASE("gpu device api: none refuses everything, saying why", "[gpu]") {
  NoneDeviceApi none("built without CUDA");
  CHECK(none.name() == "none");
  const auto devices = none.Devices();
  REQUIRE(absl::IsFailedPrecondition(devices.status()));
  CHECK(devices.status().message().find("built without CUDA") != std::string::npos);
  CHECK(absl::IsFailedPrecondition(none.Find(kUuid0).status()));
  CHECK(absl::IsFailedPrecondition(none.CreateQueue(Gpu(kUuid0, kMiB)).status()));
  CHECK(absl::IsFailedPrecondition(none.Allocate(Gpu(kUuid0, kMiB), 1).status()));
  int x = 0;
  CHECK(absl::IsFailedPrecondition(none.RegisterHost(&x, sizeof x).status()));
  std::unique_ptr<DeviceApi> made = MakeDeviceApi();
  if (BuiltWithCuda()) {
    CHECK(made->name() == "cuda");
  } else {
    CHECK(made->name() == "none");
    CHECK(absl::IsFailedPrecondition(made->Devices().status()));
  }
}

}  // namespace conveyor::gpu
