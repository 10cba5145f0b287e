// Tests of StreamCall (server/service/stream_call.h), the protocol of a
// StreamBatches call, driven message by message through a fake RPC with
// no gRPC: one write at a time and StreamEnd before Finish, a failed
// write, the wait for a shared-memory client's hand-over (woken by it, or
// ended when the deadline's callback runs), an unparseable message, stale
// Releases (the batch sequence they name), Detach giving everything
// back, and the call's figures: each batch's data wait, refusals by code. Compiled only with the
// server library.
#ifdef CONVEYOR_HAVE_SERVER

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "server/service/stream_call.h"
#include "tests/support/fake_stream_rpc.h"
#include "tests/unit/service_test_util.h"

namespace conveyor::server {
namespace {

using FakeRpc = testing::FakeStreamRpc;

// Completes writes (releasing each batch) until the call has written
// StreamEnd or finished; returns the kinds written, in order.
std::vector<v1::ServerMessage::KindCase> DriveToEnd(StreamCall& call, FakeRpc& rpc,
                                                    std::vector<v1::ServerMessage>* out = nullptr) {
  std::vector<v1::ServerMessage::KindCase> kinds;
  while (true) {
    std::optional<v1::ServerMessage> m;
    REQUIRE(Eventually([&] { return (m = rpc.TakeWrite()).has_value() || rpc.finished(); }));
    if (!m) return kinds;
    kinds.push_back(m->kind_case());
    if (out != nullptr) out->push_back(*m);
    if (m->has_batch()) {
      v1::ClientMessage release = ReleaseMessage(m->batch().slot());
      call.OnRead(&release);
    }
    call.OnWriteDone(true);
    if (m->has_end()) return kinds;
  }
}

TEST_CASE("stream call: one write at a time, StreamEnd, then Finish", "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  {
    StreamCall call(t.service.get(), kTcpPeer, &rpc);
    call.Start();
    CHECK(rpc.reads() == 1);
    v1::ClientMessage open = OpenMessage(Request(2));
    call.OnRead(&open);
    std::vector<v1::ServerMessage> written;
    const auto kinds = DriveToEnd(call, rpc, &written);
    using K = v1::ServerMessage::KindCase;
    CHECK(kinds ==
          std::vector<K>{K::kOpened, K::kBatch, K::kBatch, K::kBatch, K::kEpochEnd, K::kEnd});
    CHECK(written[0].opened().transport() == v1::INLINE);
    CHECK(written[3].batch().images().size() == written[3].batch().images_bytes());
    CHECK(written[5].end().batches() == 3);
    REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
    CHECK(rpc.finished()->ok());
    CHECK_FALSE(rpc.misused());
    CHECK(t.BytesInUse() > 0);  // the session lives until Detach
    call.Detach();
  }
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("stream call: a failed write ends the call CANCELLED and drops the rest",
          "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  v1::OpenStream r = Request(2);
  r.set_num_epochs(0);  // endless
  v1::ClientMessage open = OpenMessage(r);
  call.OnRead(&open);
  REQUIRE(Eventually([&] { return rpc.TakeWrite().has_value(); }));  // StreamOpened
  call.OnWriteDone(false);                                           // the client is gone
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(absl::IsCancelled(*rpc.finished()));
  CHECK_FALSE(rpc.misused());
  call.Detach();
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("stream call: a shared-memory stream's call waits for the hand-over", "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kUnixPeer, &rpc);
  call.Start();
  v1::ClientMessage open = OpenMessage(Request(2));
  call.OnRead(&open);
  std::vector<v1::ServerMessage> written;
  DriveToEnd(call, rpc, &written);
  REQUIRE(written[0].opened().transport() == v1::SHARED_MEMORY);
  // StreamEnd is written and nothing is in flight, yet the call waits: the
  // client has not fetched its region.
  REQUIRE(Eventually([&] { return rpc.deadlines_set() == 1; }));
  CHECK_FALSE(rpc.finished().has_value());

  SECTION("the hand-over wakes it") {
    auto region = t.shm->RegionFd(written[0].opened().stream_id(), SecretOf(written[0].opened()));
    REQUIRE(region.ok());
    REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
    CHECK(rpc.finished()->ok());
  }
  SECTION("the deadline ends it") {
    rpc.expire()();  // what the RPC's alarm does when the grace period is over
    REQUIRE(rpc.finished().has_value());
    CHECK(rpc.finished()->ok());
  }
  SECTION("shutdown ends it") {
    t.service->BeginShutdown();
    REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  }
  CHECK(rpc.deadlines_set() == 1);
  CHECK_FALSE(rpc.misused());
  call.Detach();
  CHECK(t.BytesInUse() == 0);
  // After Detach the deadline's callback reaches nothing.
  rpc.expire()();
}

TEST_CASE("stream call: a call cancelled before the stream ends does not wait", "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kUnixPeer, &rpc);
  call.Start();
  v1::ClientMessage open = OpenMessage(Request(2));
  call.OnRead(&open);
  REQUIRE(Eventually([&] { return rpc.TakeWrite().has_value(); }));  // StreamOpened
  call.OnCancel();
  call.OnWriteDone(true);
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(absl::IsCancelled(*rpc.finished()));
  CHECK(rpc.deadlines_set() == 0);  // nobody is left to fetch the region
  call.Detach();
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("stream call: an unparseable message ends the call INVALID_ARGUMENT saying so",
          "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  const bool opened = GENERATE(false, true);
  if (opened) {
    v1::OpenStream r = Request(2);
    r.set_num_epochs(0);  // endless
    v1::ClientMessage open = OpenMessage(r);
    call.OnRead(&open);
    REQUIRE(Eventually([&] { return rpc.TakeWrite().has_value(); }));  // StreamOpened
    call.OnUnparseable();
    call.OnWriteDone(true);
  } else {
    call.OnUnparseable();
  }
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(absl::IsInvalidArgument(*rpc.finished()));
  CHECK_THAT(std::string(rpc.finished()->message()),
             Catch::Matchers::Contains("does not parse as a conveyor.v1.ClientMessage"));
  CHECK_FALSE(rpc.misused());
  call.Detach();
  CHECK(t.BytesInUse() == 0);
}

v1::ClientMessage ReleaseOf(uint32_t slot, std::optional<uint64_t> sequence) {
  v1::ClientMessage m = ReleaseMessage(slot);
  if (sequence) m.mutable_release()->add_sequences(*sequence);
  return m;
}

// The next write, completed; it must be a batch.
v1::Batch NextBatch(StreamCall& call, FakeRpc& rpc) {
  std::optional<v1::ServerMessage> m;
  REQUIRE(Eventually([&] { return (m = rpc.TakeWrite()).has_value(); }));
  call.OnWriteDone(true);
  REQUIRE(m->has_batch());
  return m->batch();
}

TEST_CASE("stream call: a Release naming a batch its slot no longer holds is refused",
          "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  v1::OpenStream r = Request(2);
  r.set_credits(1);  // one slot: every batch reuses it
  v1::ClientMessage open = OpenMessage(r);
  call.OnRead(&open);
  REQUIRE(Eventually([&] { return rpc.TakeWrite().has_value(); }));  // StreamOpened
  call.OnWriteDone(true);
  const v1::Batch first = NextBatch(call, rpc);
  v1::ClientMessage release = ReleaseOf(first.slot(), first.sequence());
  call.OnRead(&release);
  const v1::Batch second = NextBatch(call, rpc);
  REQUIRE(second.slot() == first.slot());
  REQUIRE(second.sequence() == first.sequence() + 1);
  std::string expected;

  SECTION("the first batch's Release, again: stale") {
    release = ReleaseOf(first.slot(), first.sequence());
    expected = absl::StrFormat("slot %d for batch %d: that slot holds batch %d now", first.slot(),
                               first.sequence(), second.sequence());
  }
  SECTION("a batch not delivered yet") {
    release = ReleaseOf(first.slot(), second.sequence() + 1);
    expected = "that slot holds batch";
  }
  SECTION("a slot never delivered") {
    release = ReleaseOf(first.slot() + 1, 0);
    expected = "holds no batch in that slot";
  }
  SECTION("fewer sequences than slots") {
    release = ReleaseOf(first.slot(), second.sequence());
    release.mutable_release()->add_slots(first.slot() + 1);
    expected = "2 slot(s) but 1 batch sequence(s)";
  }
  call.OnRead(&release);
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(absl::IsInvalidArgument(*rpc.finished()));
  CHECK_THAT(std::string(rpc.finished()->message()), Catch::Matchers::Contains(expected));
  CHECK_FALSE(rpc.misused());
  call.Detach();
  CHECK(t.BytesInUse() == 0);
}

TEST_CASE("stream call: Releases with the right sequences, or with none, are served",
          "[stream_call]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  v1::OpenStream r = Request(2);
  r.set_credits(1);
  v1::ClientMessage open = OpenMessage(r);
  call.OnRead(&open);
  REQUIRE(Eventually([&] { return rpc.TakeWrite().has_value(); }));  // StreamOpened
  call.OnWriteDone(true);
  bool with_sequence = false;
  int batches = 0;
  while (true) {
    std::optional<v1::ServerMessage> m;
    REQUIRE(Eventually([&] { return (m = rpc.TakeWrite()).has_value() || rpc.finished(); }));
    if (!m) break;
    call.OnWriteDone(true);
    if (m->has_end()) break;
    if (!m->has_batch()) continue;
    ++batches;
    // Alternate: old clients send no sequence.
    with_sequence = !with_sequence;
    v1::ClientMessage release =
        ReleaseOf(m->batch().slot(),
                  with_sequence ? std::optional<uint64_t>(m->batch().sequence()) : std::nullopt);
    call.OnRead(&release);
  }
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(rpc.finished()->ok());
  CHECK(batches == 3);
  call.Detach();
}

TEST_CASE("stream call: every batch's data wait is counted, the client's hold time is not",
          "[stream_call][metrics]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  v1::OpenStream r = Request(2);
  r.set_credits(1);
  v1::ClientMessage open = OpenMessage(r);
  call.OnRead(&open);
  // The client holds each batch this long before releasing it: time it
  // spends training, not waiting for data.
  constexpr auto kHold = std::chrono::milliseconds(250);
  int batches = 0;
  while (true) {
    std::optional<v1::ServerMessage> m;
    REQUIRE(Eventually([&] { return (m = rpc.TakeWrite()).has_value() || rpc.finished(); }));
    if (!m) break;
    call.OnWriteDone(true);
    if (m->has_end()) break;
    if (!m->has_batch()) continue;
    ++batches;
    std::this_thread::sleep_for(kHold);
    v1::ClientMessage release = ReleaseMessage(m->batch().slot());
    call.OnRead(&release);
  }
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  call.Detach();
  const v1::GetStatsResponse stats = t.service->GetStats();
  const v1::DataWaitStats* wait = nullptr;
  for (const v1::DataWaitStats& w : stats.data_wait()) {
    if (w.pipeline() == r.pipeline()) wait = &w;
  }
  REQUIRE(wait != nullptr);
  CHECK(batches == 3);
  CHECK(wait->count() == 3);
  // Two of the three waits began after a hold: counting the holds would
  // make at least 2 x kHold.
  CHECK(wait->sum_ns() < 2 * std::chrono::nanoseconds(kHold).count());
}

TEST_CASE("stream call: a refused stream is counted by its code", "[stream_call][metrics]") {
  ServiceFixture t;
  FakeRpc rpc;
  StreamCall call(t.service.get(), kTcpPeer, &rpc);
  call.Start();
  v1::OpenStream r = Request(2);
  r.set_pipeline("no-such-pipeline");
  v1::ClientMessage open = OpenMessage(r);
  call.OnRead(&open);
  REQUIRE(Eventually([&] { return rpc.finished().has_value(); }));
  CHECK(absl::IsNotFound(*rpc.finished()));
  call.Detach();
  const v1::GetStatsResponse stats = t.service->GetStats();
  const auto& refused = stats.streams_refused_by_code();
  CHECK(refused.at("not_found") == 1);
  CHECK(refused.at("invalid_argument") == 0);
  CHECK(refused.size() == 16);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
