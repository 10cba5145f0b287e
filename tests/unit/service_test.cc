// Tests of ConveyorService (server/service/service.h) and its gRPC adapter
// (server/service/grpc_service.h) without a network: the service driven directly,
// and the adapter's StreamReactor over an in-process channel. Covered: the
// fd hand-over with right and wrong secrets, DATA_LOSS under fail_fast and
// failures listed under skip (end to end through the reactor), the wait
// for a shared-memory client's hand-over (woken by it, or ended by the
// grace period), the reactor's protocol errors, and OpenStream racing
// BeginShutdown with no budget leaked. Compiled only with the server
// library.
#ifdef CONVEYOR_HAVE_SERVER

#include "server/service/service.h"

#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "conveyor/v1/conveyor.grpc.pb.h"
#include "server/ops/metrics_exposition.h"
#include "server/service/grpc_service.h"
#include "server/transport/fd_server.h"
#include "tests/unit/service_test_util.h"
#include "tests/unit/socket_test_util.h"

namespace conveyor::server {
namespace {

// One StreamBatches call over the in-process channel, with a deadline so
// that a test that would hang fails instead. Messages after the first go
// through Send, written by a thread of the call's own like a real client's:
// a write waits until the server reads, and the server stops reading once
// the stream has ended, so a reader that wrote its releases itself could
// wait for ever while the server waits for it to read.
class Call {
 public:
  explicit Call(v1::Conveyor::Stub* stub,
                std::chrono::seconds deadline = std::chrono::seconds(20)) {
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    stream = stub->StreamBatches(&context);
    writer_ = std::thread([this] { WriteLoop(); });
  }
  ~Call() {
    if (!finished_) context.TryCancel();
    StopWriter();
  }

  // Queues `m` for the writer thread; never waits.
  void Send(v1::ClientMessage m) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(m));
    }
    cv_.notify_all();
  }

  grpc::Status Finish() {
    grpc::Status status = stream->Finish();
    finished_ = true;
    StopWriter();
    return status;
  }

  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> stream;

 private:
  void WriteLoop() {
    while (true) {
      v1::ClientMessage m;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping
        m = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!stream->Write(m)) return;  // the call is over
    }
  }
  void StopWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      queue_.clear();
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }

  bool finished_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::ClientMessage> queue_;
  bool stop_ = false;
  std::thread writer_;
};

// What a client that releases every batch at once saw of its stream.
struct Seen {
  v1::StreamOpened opened;
  std::vector<v1::Batch> batches;
  int epoch_ends = 0;
  bool stream_end = false;
  grpc::Status status;
};

// Reads a call to its end, releasing each batch; stops after StreamEnd when
// `until_end` (the call then stays open until the server finishes it).
Seen ReadAll(Call& call, bool until_end = false) {
  Seen seen;
  v1::ServerMessage m;
  while (call.stream->Read(&m)) {
    switch (m.kind_case()) {
      case v1::ServerMessage::kOpened: seen.opened = m.opened(); break;
      case v1::ServerMessage::kBatch:
        seen.batches.push_back(m.batch());
        call.Send(ReleaseMessage(m.batch().slot()));
        break;
      case v1::ServerMessage::kEpochEnd: ++seen.epoch_ends; break;
      case v1::ServerMessage::kEnd:
        seen.stream_end = true;
        if (until_end) return seen;
        break;
      default: break;
    }
  }
  seen.status = call.Finish();
  return seen;
}

// ------------------------------------------------------------ the service

TEST_CASE("service: the fd socket hands the region over for the right secret only", "[service]") {
  ServiceFixture t;
  std::atomic<int> wakes{0};
  auto session = t.service->OpenStream(Request(), kUnixPeer, [&] { ++wakes; });
  REQUIRE(session.ok());
  const v1::StreamOpened opened = (*session)->opened();  // a copy: it outlives the session
  CHECK(opened.transport() == v1::SHARED_MEMORY);
  CHECK(opened.shared_memory().fd_socket() == t.fd_path);
  const Secret secret = SecretOf(opened);
  auto fd_server = FdServer::Start(
      t.fd_path, 0600,
      [&t](uint64_t id, const Secret& s, const UnixPeer&) { return t.shm->RegionFd(id, s); });
  REQUIRE(fd_server.ok());

  Secret wrong = secret;
  wrong[31] ^= 1;
  for (auto [id, s] : {std::pair{opened.stream_id(), wrong}, {opened.stream_id() + 1, secret}}) {
    UniqueFd conn = testing::ConnectUnix(t.fd_path);
    REQUIRE(conn.valid());
    testing::HandOverReply r = testing::RequestRegion(conn.get(), id, s);
    CHECK(r.status == 1);
    CHECK_FALSE(r.fd.valid());
  }
  CHECK(wakes == 0);

  UniqueFd conn = testing::ConnectUnix(t.fd_path);
  REQUIRE(conn.valid());
  testing::HandOverReply r = testing::RequestRegion(conn.get(), opened.stream_id(), secret);
  CHECK(r.status == 0);
  REQUIRE(r.fd.valid());
  struct stat st {};
  REQUIRE(::fstat(r.fd.get(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_size) >= opened.shared_memory().region_bytes());
  const v1::SharedMemoryOpened& shm = opened.shared_memory();
  CHECK(shm.region_bytes() == uint64_t{shm.num_slots()} * shm.slot_bytes());
  CHECK(shm.num_slots() == Request().credits());
  CHECK(wakes == 1);  // the stream's owner may have been waiting for this

  // Once the session is gone, so is the stream's entry. (`opened` lives in
  // the session: keep the id.)
  const uint64_t stream_id = opened.stream_id();
  session->reset();
  UniqueFd late = testing::ConnectUnix(t.fd_path);
  CHECK(testing::RequestRegion(late.get(), stream_id, secret).status == 1);
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("service: a stream counts as open until its session is gone, not only its engine work",
          "[service]") {
  ServiceFixture t;
  auto session = t.service->OpenStream(Request(), kTcpPeer);
  REQUIRE(session.ok());
  CHECK(t.service->GetStats().streams_open() == 1);
  // The client went away: the engine lets go of the stream at once, the
  // session (and its max_streams place) only when the call ends.
  (*session)->stream().Cancel(absl::CancelledError("client went away"));
  REQUIRE(Eventually([&] { return t.service->GetStats().streams_size() == 0; }));
  CHECK(t.service->GetStats().streams_open() == 1);
  session->reset();
  CHECK(t.service->GetStats().streams_open() == 0);
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE(
    "service: StreamOpened tells the stream's plan, the budget holds its arena, and the "
    "engine delivers the batches it tells",
    "[service][plan]") {
  ServiceFixture t;  // 6 samples
  struct Case {
    uint32_t batch, rank, world;
    bool drop_last;
    bool resumed;
    uint64_t resume_epoch, resume_offset;
  };
  for (const Case& c : std::vector<Case>{{4, 0, 1, false, false, 0, 0},
                                         {2, 1, 4, false, false, 0, 0},
                                         {2, 1, 4, true, false, 0, 0},
                                         {4, 0, 1, false, true, 1, 0},
                                         {2, 0, 2, false, true, 2, 3},
                                         {4, 1, 2, true, true, 3, 1}}) {
    INFO("batch " << c.batch << " rank " << c.rank << "/" << c.world << " drop_last " << c.drop_last
                  << " resume " << c.resumed << " " << c.resume_epoch << ":" << c.resume_offset);
    v1::OpenStream r = Request(c.batch);
    r.set_first_epoch(1);
    r.set_num_epochs(3);  // epochs 1, 2, 3
    r.set_rank(c.rank);
    r.set_world_size(c.world);
    r.set_drop_last(c.drop_last);
    if (c.resumed) {
      r.mutable_resume()->set_epoch(c.resume_epoch);
      r.mutable_resume()->set_offset(c.resume_offset);
    }
    auto session = t.service->OpenStream(r, kTcpPeer);
    REQUIRE(session.ok());
    Stream& stream = (*session)->stream();
    const v1::StreamOpened& op = (*session)->opened();

    // The same request planned in core.
    StreamOptions so;
    so.batch_size = c.batch;
    so.first_epoch = 1;
    so.num_epochs = 3;
    so.rank = c.rank;
    so.world_size = c.world;
    so.drop_last = c.drop_last;
    so.shuffle = false;
    so.num_slots = r.credits();
    std::optional<ResumePosition> resume;
    if (c.resumed) resume = ResumePosition{c.resume_epoch, c.resume_offset};
    auto plan = PlanStream(stream.pipeline(), so, resume);
    REQUIRE(plan.ok());
    CHECK(op.samples_per_epoch() == plan->samples_per_epoch);
    CHECK(op.batches_per_epoch() == plan->batches_per_epoch);
    CHECK(op.has_inline_message());  // a TCP peer: the region stays in the daemon
    CHECK(stream.arena().slot_bytes() == plan->slot_bytes);
    CHECK(stream.arena().num_slots() == r.credits());
    CHECK(stream.arena().total_bytes() == plan->arena_bytes);
    CHECK(t.BytesInUse() == plan->arena_bytes);
    CHECK(stream.plan().total_batches == plan->total_batches);
    // By hand, from the dataset's 6 samples.
    const uint64_t per_rank = c.drop_last ? 6 / c.world : (6 + c.world - 1) / c.world;
    CHECK(op.samples_per_epoch() == per_rank);
    CHECK(op.batches_per_epoch() == (per_rank + c.batch - 1) / c.batch);

    // What the engine delivers: full epochs of batches_per_epoch batches,
    // the resumed epoch's rest, plan->total_batches in all.
    std::map<uint64_t, uint64_t> batches;
    uint64_t total = 0;
    for (;;) {
      auto next = stream.Next(absl::Seconds(30));
      REQUIRE(next.ok());
      if (!next->has_value()) break;
      ++batches[(*next)->epoch];
      ++total;
      REQUIRE(stream.Release((*next)->slot).ok());
    }
    CHECK(total == plan->total_batches);
    const uint64_t first = c.resumed ? c.resume_epoch : 1;
    CHECK(batches.size() == 4 - first);
    for (const auto& [epoch, n] : batches) {
      if (epoch != first || !c.resumed || c.resume_offset == 0) {
        CHECK(n == op.batches_per_epoch());
      } else {
        CHECK(n == plan->first_epoch_batches);
      }
    }
    session->reset();
    CHECK(t.BytesInUse() == 0);
  }
}

TEST_CASE("service: transports are chosen by peer and request", "[service]") {
  ServiceFixture t;
  auto unix_auto = t.service->OpenStream(Request(), kUnixPeer);
  REQUIRE(unix_auto.ok());
  CHECK((*unix_auto)->opened().transport() == v1::SHARED_MEMORY);
  auto tcp_auto = t.service->OpenStream(Request(), kTcpPeer);
  REQUIRE(tcp_auto.ok());
  CHECK((*tcp_auto)->opened().transport() == v1::INLINE);
  CHECK((*tcp_auto)->opened().has_inline_message());

  auto shm_over_tcp = t.service->OpenStream(Request(2, v1::SHARED_MEMORY), kTcpPeer);
  CHECK(absl::IsFailedPrecondition(shm_over_tcp.status()));
  // This daemon has no data socket.
  auto data_socket = t.service->OpenStream(Request(2, v1::DATA_SOCKET), kTcpPeer);
  CHECK(absl::IsFailedPrecondition(data_socket.status()));
  CHECK(std::string(data_socket.status().message()).find("no data socket") != std::string::npos);
  auto unknown = t.service->OpenStream(Request(2, static_cast<v1::Transport>(77)), kTcpPeer);
  CHECK(absl::IsInvalidArgument(unknown.status()));
}

TEST_CASE("service: a client opens only the pipelines it is allowed", "[service]") {
  ServiceFixture t;
  ClientIdentity limited = kTcpPeer;
  limited.principal = "reader";
  limited.allowed_pipelines = std::set<std::string>{"other"};
  auto refused = t.service->OpenStream(Request(), limited);
  REQUIRE(absl::IsPermissionDenied(refused.status()));
  const std::string message(refused.status().message());
  CHECK(message.find("'test'") != std::string::npos);
  CHECK(message.find("as 'reader'") != std::string::npos);
  CHECK(t.BytesInUse() == 0);
  CHECK(t.service->GetStats().streams_open() == 0);

  limited.allowed_pipelines->insert("test");
  auto opened = t.service->OpenStream(Request(), limited);
  REQUIRE(opened.ok());
  CHECK((*opened)->client().principal == "reader");
}

TEST_CASE(
    "service: OpenStream racing BeginShutdown either opens a cancelled stream or is "
    "refused, and leaks no budget",
    "[service]") {
  ServiceFixture t;
  constexpr int kThreads = 8, kOpensPerThread = 6;
  struct Outcome {
    bool opened = false;
    absl::Status open_status;
    absl::Status stream_end;  // how an opened stream ended
  };
  std::vector<std::vector<Outcome>> outcomes(kThreads);
  std::atomic<int> started{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ++started;
      while (!go.load()) std::this_thread::yield();
      for (int k = 0; k < kOpensPerThread; ++k) {
        v1::OpenStream r = Request();
        r.set_num_epochs(0);  // endless: only a cancel ends it
        auto session = t.service->OpenStream(r, (i + k) % 2 == 0 ? kUnixPeer : kTcpPeer);
        Outcome o;
        o.opened = session.ok();
        o.open_status = session.status();
        if (session.ok()) {
          // Consume until the stream ends: it must, since shutdown cancels it.
          Stream& s = (*session)->stream();
          while (true) {
            auto next = s.Next(absl::Seconds(20));
            if (!next.ok()) {
              o.stream_end = next.status();
              break;
            }
            if (!next->has_value()) {
              o.stream_end = absl::InternalError("an endless stream ended");
              break;
            }
            (void)s.Release((*next)->slot);
          }
        }
        outcomes[i].push_back(o);
      }
    });
  }
  while (started.load() < kThreads) std::this_thread::yield();
  go.store(true);
  std::this_thread::yield();
  t.service->BeginShutdown();
  for (auto& th : threads) th.join();

  int opened = 0, refused = 0;
  for (const auto& per_thread : outcomes) {
    for (const Outcome& o : per_thread) {
      if (o.opened) {
        ++opened;
        INFO("stream ended with " << o.stream_end.ToString());
        CHECK(absl::IsUnavailable(o.stream_end));
      } else {
        ++refused;
        INFO("open failed with " << o.open_status.ToString());
        CHECK(absl::IsUnavailable(o.open_status));
      }
    }
  }
  CHECK(opened + refused == kThreads * kOpensPerThread);
  CHECK(refused > 0);  // every thread opens again after its stream was cancelled
  CHECK(t.BytesInUse() == 0);
  CHECK(Eventually([&] { return t.service->GetStats().streams_size() == 0; }));
}

// ------------------------------------------------- end to end over gRPC

TEST_CASE("service over gRPC: an inline stream delivers every batch, then StreamEnd",
          "[service][grpc]") {
  ServiceFixture t;
  Call call(t.stub.get());
  REQUIRE(call.stream->Write(OpenMessage(Request(2, v1::INLINE))));
  Seen seen = ReadAll(call);
  CHECK(seen.status.ok());
  CHECK(seen.opened.transport() == v1::INLINE);
  REQUIRE(seen.batches.size() == 3);
  CHECK(seen.stream_end);
  CHECK(seen.epoch_ends == 1);
  for (const v1::Batch& b : seen.batches) {
    CHECK(b.images().size() == b.images_bytes());
    CHECK(b.images_bytes() == 2u * 3 * 32 * 32);
    CHECK(b.shape_size() == 4);
    CHECK(b.labels_size() == 2);
  }
  CHECK(Eventually([&] { return t.BytesInUse() == 0; }));
}

TEST_CASE(
    "service over gRPC: a corrupt sample under fail_fast ends the call with DATA_LOSS "
    "after the batches before it",
    "[service][grpc]") {
  ServiceFixtureOptions o;
  o.error_policy = ErrorPolicy::kFailFast;
  o.corrupt_sample = true;
  ServiceFixture t(o);
  Call call(t.stub.get());
  REQUIRE(call.stream->Write(OpenMessage(Request(2, v1::INLINE))));
  Seen seen = ReadAll(call);
  // 7 samples in order: batches {0,1} {2,3} {4,5}, then {6 (corrupt)}.
  CHECK(seen.status.error_code() == grpc::StatusCode::DATA_LOSS);
  CHECK(seen.status.error_message().find("img_9999.jpg") != std::string::npos);
  CHECK(seen.status.error_message().find("fail_fast") != std::string::npos);
  CHECK(seen.batches.size() == 3);
  CHECK_FALSE(seen.stream_end);
  CHECK(Eventually([&] { return t.BytesInUse() == 0; }));
}

// "name{labels}" -> value of every sample line of the service's exposition.
std::map<std::string, double> Scrape(const ConveyorService& service) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(RenderPrometheusText(service.GetStats()), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    REQUIRE(space != absl::string_view::npos);
    double v = 0;
    REQUIRE(absl::SimpleAtod(line.substr(space + 1), &v));
    out[std::string(line.substr(0, space))] = v;
  }
  return out;
}

TEST_CASE(
    "service over gRPC: its metrics count deliveries and failures by reason; counters never "
    "go back",
    "[service][grpc][metrics]") {
  ServiceFixtureOptions o;
  o.corrupt_sample = true;  // 7 samples, the last not a JPEG
  ServiceFixture t(o);
  const std::map<std::string, double> before = Scrape(*t.service);
  const std::string images =
      R"(conveyor_delivered_images_total{pipeline="test",transport="inline"})";
  const std::string batches =
      R"(conveyor_delivered_batches_total{pipeline="test",transport="inline"})";
  const std::string bytes = R"(conveyor_delivered_bytes_total{pipeline="test",transport="inline"})";
  CHECK(before.at(images) == 0);
  CHECK(before.at("conveyor_streams_opened_total") == 0);
  std::map<std::string, double> prev = before;
  for (int round = 1; round <= 2; ++round) {
    Call call(t.stub.get());
    REQUIRE(call.stream->Write(OpenMessage(Request(2, v1::INLINE))));
    Seen seen = ReadAll(call);
    REQUIRE(seen.status.ok());
    REQUIRE(seen.batches.size() == 4);
    CHECK(Eventually([&] { return Scrape(*t.service).at("conveyor_streams_open") == 0; }));
    const std::map<std::string, double> after = Scrape(*t.service);
    CHECK(after.at(images) == 6 * round);
    CHECK(after.at(batches) == 4 * round);
    CHECK(after.at(bytes) == 6 * round * 3 * 32 * 32);
    CHECK(
        after.at(R"(conveyor_delivered_images_total{pipeline="test",transport="shared_memory"})") ==
        0);
    CHECK(after.at("conveyor_streams_opened_total") == round);
    CHECK(after.at(R"(conveyor_stage_items_out_total{stage="decode"})") == 6 * round);
    // The one failure of each round is the decode stage's, by its status code.
    double failures = 0;
    for (const auto& [name, v] : after) {
      if (name.rfind(R"(conveyor_stage_failures_total{stage="decode",reason=")", 0) == 0) {
        failures += v;
      }
    }
    CHECK(failures == round);
    // Every counter is at least what it was in the previous round
    // (finished streams stay counted).
    for (const auto& [name, v] : prev) {
      if (name.find("_total") == std::string::npos) continue;
      INFO(name);
      REQUIRE(after.count(name) == 1);
      CHECK(after.at(name) >= v);
    }
    prev = after;
  }
}

TEST_CASE("service over gRPC: a corrupt sample under skip is left out and named in its batch",
          "[service][grpc]") {
  ServiceFixtureOptions o;
  o.corrupt_sample = true;
  ServiceFixture t(o);
  Call call(t.stub.get());
  REQUIRE(call.stream->Write(OpenMessage(Request(2, v1::INLINE))));
  Seen seen = ReadAll(call);
  CHECK(seen.status.ok());
  REQUIRE(seen.batches.size() == 4);
  // 7 samples in order: batches {0,1} {2,3} {4,5}, then {6 (corrupt)}.
  for (size_t i = 0; i < 3; ++i) CHECK(seen.batches[i].failures_size() == 0);
  const v1::Batch& last = seen.batches.back();
  CHECK(last.num_samples() == 0);
  CHECK(last.shape(0) == 0);
  CHECK(last.images().empty());
  CHECK(last.end_of_epoch());
  REQUIRE(last.failures_size() == 1);
  CHECK(last.failures(0).path().find("img_9999.jpg") != std::string::npos);
  CHECK(seen.stream_end);
}

TEST_CASE(
    "service over gRPC: a shared-memory call waits for the hand-over and ends when it "
    "comes",
    "[service][grpc]") {
  ServiceFixtureOptions o;
  o.shm_for_every_peer = true;
  o.handover_grace = std::chrono::hours(1);  // only the hand-over can end the wait
  ServiceFixture t(o);
  Call call(t.stub.get());
  REQUIRE(call.stream->Write(OpenMessage(Request(2))));
  Seen seen = ReadAll(call, /*until_end=*/true);
  REQUIRE(seen.stream_end);
  REQUIRE(seen.opened.transport() == v1::SHARED_MEMORY);
  CHECK(seen.batches.size() == 3);
  for (const v1::Batch& b : seen.batches) CHECK(b.images().empty());
  // The stream is over, yet the call (and with it the registry entry) is
  // still there for the client to fetch its region.
  auto region = t.shm->RegionFd(seen.opened.stream_id(), SecretOf(seen.opened));
  REQUIRE(region.ok());
  // The hand-over woke the call: it finishes now, not in an hour.
  v1::ServerMessage m;
  CHECK_FALSE(call.stream->Read(&m));
  CHECK(call.Finish().ok());
  CHECK(Eventually([&] { return t.BytesInUse() == 0; }));
}

TEST_CASE(
    "service over gRPC: a shared-memory call whose client never fetches its region "
    "ends after the grace period",
    "[service][grpc]") {
  ServiceFixtureOptions o;
  o.shm_for_every_peer = true;
  o.handover_grace = std::chrono::milliseconds(100);
  ServiceFixture t(o);
  Call call(t.stub.get());
  REQUIRE(call.stream->Write(OpenMessage(Request(2))));
  Seen seen = ReadAll(call);  // to the end of the call
  CHECK(seen.stream_end);
  CHECK(seen.status.ok());
  // The call is over: the region is no longer handed out.
  CHECK(Eventually([&] {
    return absl::IsPermissionDenied(
        t.shm->RegionFd(seen.opened.stream_id(), SecretOf(seen.opened)).status());
  }));
  CHECK(Eventually([&] { return t.BytesInUse() == 0; }));
}

TEST_CASE("service over gRPC: protocol errors end the call with INVALID_ARGUMENT",
          "[service][grpc]") {
  ServiceFixture t;
  SECTION("OpenStream twice") {
    Call call(t.stub.get());
    REQUIRE(call.stream->Write(OpenMessage(Request())));
    call.Send(OpenMessage(Request()));
    Seen seen = ReadAll(call);
    CHECK(seen.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(seen.status.error_message().find("twice") != std::string::npos);
  }
  SECTION("Release before OpenStream") {
    Call call(t.stub.get());
    REQUIRE(call.stream->Write(ReleaseMessage(0)));
    Seen seen = ReadAll(call);
    CHECK(seen.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(seen.status.error_message().find("before OpenStream") != std::string::npos);
  }
  SECTION("Release of a slot the client does not hold") {
    Call call(t.stub.get());
    v1::OpenStream r = Request();
    r.set_num_epochs(0);
    REQUIRE(call.stream->Write(OpenMessage(r)));
    v1::ServerMessage m;
    REQUIRE(call.stream->Read(&m));
    REQUIRE(m.has_opened());
    call.Send(ReleaseMessage(m.opened().shared_memory().num_slots() + 5));
    while (call.stream->Read(&m)) {
    }
    const grpc::Status status = call.Finish();
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("an empty message") {
    Call call(t.stub.get());
    REQUIRE(call.stream->Write(v1::ClientMessage()));
    Seen seen = ReadAll(call);
    CHECK(seen.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(seen.status.error_message().find("empty") != std::string::npos);
  }
  SECTION("closing before OpenStream") {
    Call call(t.stub.get());
    REQUIRE(call.stream->WritesDone());
    Seen seen = ReadAll(call);
    CHECK(seen.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  CHECK(Eventually([&] { return t.BytesInUse() == 0; }));
}

TEST_CASE("service over gRPC: a call made while shutting down is UNAVAILABLE", "[service][grpc]") {
  ServiceFixture t;
  t.service->BeginShutdown();
  Call call(t.stub.get());
  call.stream->Write(OpenMessage(Request()));
  Seen seen = ReadAll(call);
  CHECK(seen.status.error_code() == grpc::StatusCode::UNAVAILABLE);
}

// Refuses every call, as an access check refuses a client without
// credentials.
class RefuseEveryone final : public ClientIdentifier {
 public:
  absl::StatusOr<ClientIdentity> Identify(const grpc::ServerContextBase&) const override {
    return absl::UnauthenticatedError("no credentials");
  }
};

TEST_CASE("service over gRPC: a client the identifier refuses gets its status from every call",
          "[service][grpc]") {
  RefuseEveryone refuse;
  ServiceFixtureOptions o;
  o.identifier = &refuse;
  ServiceFixture t(o);
  {
    grpc::ClientContext context;
    v1::ListPipelinesResponse pipelines;
    const grpc::Status st = t.stub->ListPipelines(&context, {}, &pipelines);
    CHECK(st.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(st.error_message() == "no credentials");
    CHECK(pipelines.pipelines_size() == 0);
  }
  {
    grpc::ClientContext context;
    v1::GetStatsResponse stats;
    CHECK(t.stub->GetStats(&context, {}, &stats).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  }
  Call call(t.stub.get());
  call.stream->Write(OpenMessage(Request()));
  Seen seen = ReadAll(call);
  CHECK(seen.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(seen.batches.empty());
  CHECK(t.service->GetStats().streams_total() == 0);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER

namespace conveyor::server {
namespace {

ClientIdentity UnixUser(uid_t uid, bool is_operator = false) {
  ClientIdentity c = kUnixPeer;
  c.credentials = PeerCredentials{static_cast<pid_t>(100 + uid), uid, uid};
  c.is_operator = is_operator;
  return c;
}

TEST_CASE("service: GetStats shows a client only its own streams, an operator all", "[service]") {
  ServiceFixture t;
  auto a = t.service->OpenStream(Request(), UnixUser(1000));
  auto b = t.service->OpenStream(Request(), UnixUser(1001));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  auto ids = [](const v1::GetStatsResponse& r) {
    std::set<uint64_t> s;
    for (const auto& st : r.streams()) s.insert(st.stream_id());
    return s;
  };
  const v1::GetStatsResponse seen_by_a = t.service->GetStats(UnixUser(1000));
  CHECK(ids(seen_by_a) == std::set<uint64_t>{(*a)->id()});
  CHECK(seen_by_a.streams(0).peer().find("uid 1000") != std::string::npos);
  CHECK(seen_by_a.streams_open() == 2);  // daemon-wide figures stay
  CHECK(seen_by_a.slot_bytes_in_use() == t.BytesInUse());
  CHECK(ids(t.service->GetStats(UnixUser(1001))) == std::set<uint64_t>{(*b)->id()});
  CHECK(ids(t.service->GetStats(kTcpPeer)).empty());
  CHECK(ids(t.service->GetStats(UnixUser(1002, /*is_operator=*/true))) ==
        std::set<uint64_t>{(*a)->id(), (*b)->id()});
}

TEST_CASE("service: a stream's memory goes only to the uid that opened it", "[service]") {
  ServiceFixture t;
  auto a = t.service->OpenStream(Request(), UnixUser(1000));
  REQUIRE(a.ok());
  CHECK(t.service->CheckStreamOwner((*a)->id(), PeerCredentials{7, 1000, 1000}).ok());
  const absl::Status other =
      t.service->CheckStreamOwner((*a)->id(), PeerCredentials{8, 1001, 1000});
  CHECK(absl::IsPermissionDenied(other));
  CHECK(absl::IsNotFound(
      t.service->CheckStreamOwner((*a)->id() + 1, PeerCredentials{7, 1000, 1000})));
  // A stream of a client without credentials (TCP) hands memory to nobody.
  auto tcp = t.service->OpenStream(Request(/*batch_size=*/2), kTcpPeer);
  REQUIRE(tcp.ok());
  CHECK(absl::IsPermissionDenied(
      t.service->CheckStreamOwner((*tcp)->id(), PeerCredentials{7, 0, 0})));
}

TEST_CASE(
    "service: a client that holds its slots and releases none is cut off after "
    "stream_idle_timeout",
    "[service]") {
  ServiceFixtureOptions o;
  o.stream_idle_timeout = std::chrono::milliseconds(300);
  o.handover_grace = std::chrono::milliseconds(200);
  ServiceFixture t(o);
  std::atomic<int> aborts{0};
  auto session = t.service->OpenStream(Request(), UnixUser(1000), nullptr, [&] { ++aborts; });
  REQUIRE(session.ok());
  Stream& stream = (*session)->stream();
  // Take both slots (credits 2) and never release: 3 batches in the epoch,
  // so the stream cannot go on.
  int held = 0;
  absl::Status error;
  REQUIRE(Eventually([&] {
    BatchInfo b;
    if (stream.TryNext(&b, &error) == Stream::Poll::kBatch) ++held;
    return held == 2;
  }));
  BatchInfo b;
  Stream::Poll poll = Stream::Poll::kNotReady;
  REQUIRE(Eventually([&] {
    poll = stream.TryNext(&b, &error);
    return poll != Stream::Poll::kNotReady;
  }));
  REQUIRE(poll == Stream::Poll::kError);
  CHECK(absl::IsDeadlineExceeded(error));
  CHECK(error.message().find("held 2 of its 2 slots") != std::string::npos);
  CHECK(error.message().find("stream_idle_timeout_seconds is 0.3") != std::string::npos);
  // Its call never finished (as if its client read nothing): the owner is
  // told to end it.
  CHECK(Eventually([&] { return aborts == 1; }));
  CHECK(t.BytesInUse() > 0);
  session->reset();
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("service: a stream whose client holds nothing is not idle, however long it waits",
          "[service]") {
  ServiceFixtureOptions o;
  o.stream_idle_timeout = std::chrono::milliseconds(100);
  ServiceFixture t(o);
  auto session = t.service->OpenStream(Request(), UnixUser(1000));
  REQUIRE(session.ok());
  // The stream fills its slots, but its client has taken none: the daemon,
  // not the client, is the one holding them.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  BatchInfo b;
  absl::Status error;
  CHECK(
      Eventually([&] { return (*session)->stream().TryNext(&b, &error) == Stream::Poll::kBatch; }));
}

TEST_CASE("service: one client filling its per-client share does not lock another out",
          "[service]") {
  ServiceFixtureOptions o;
  o.per_client.max_streams = 2;
  o.per_client.max_credits = 3;  // Request() asks 2 credits per stream
  ServiceFixture t(o);
  auto a1 = t.service->OpenStream(Request(), UnixUser(1000));
  REQUIRE(a1.ok());
  // uid 1000 from another process: the same client.
  ClientIdentity again = UnixUser(1000);
  again.credentials->pid = 4242;
  auto a2 = t.service->OpenStream(Request(), again);
  REQUIRE_FALSE(a2.ok());
  CHECK(absl::IsResourceExhausted(a2.status()));
  CHECK(a2.status().message().find("per_client.max_credits is 3") != std::string::npos);
  // Another uid has its own share.
  auto b1 = t.service->OpenStream(Request(), UnixUser(1001));
  CHECK(b1.ok());
  // Closing gives the share back.
  const uint64_t bytes = t.BytesInUse();
  a1->reset();
  CHECK(t.BytesInUse() < bytes);
  CHECK(t.service->OpenStream(Request(), again).ok());
}

}  // namespace
}  // namespace conveyor::server
