// RemoteReader against a real HTTP server on loopback
// (tests/integration/http_object_server.py, started per test): ranges and
// whole objects byte for byte, HEAD sizes, a server that ignores Range,
// 404/416 as errors of the object, 5xx and dropped connections retried,
// an unreachable host ending UNAVAILABLE naming it, the per-host limits,
// many transfers in flight from no worker thread, and the read-ahead bound.
#ifdef CONVEYOR_HAVE_SERVER
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "core/base/posix_error.h"
#include "eventually.h"
#include "object_server.h"
#include "remote/remote_reader.h"
#include "temp_dir.h"

extern char** environ;

namespace conveyor::remote {
namespace {

using testing::ObjectServer;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7 + i / 251) & 0xff);
  return s;
}

struct Objects {
  testing::TempDir dir;
  std::vector<std::string> data;
  explicit Objects(int n, size_t size = 64 << 10) {
    for (int i = 0; i < n; ++i) {
      data.push_back(Bytes(size + static_cast<size_t>(i), i));
      std::ofstream(dir.path() + "/o" + std::to_string(i), std::ios::binary) << data.back();
    }
  }
};

std::string Str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

RemoteOptions FastRetries() {
  RemoteOptions o;
  o.initial_backoff_ms = 5;
  o.max_backoff_ms = 50;
  return o;
}

std::shared_ptr<RemoteReader> Reader(const RemoteOptions& o) {
  auto r = RemoteReader::Create(o, S3Config{});
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("RemoteReader reads ranges, whole objects and sizes; 404 and 416 name the object",
          "[remote_reader]") {
  // Through the direct HTTP/1.1 client (after libcurl's first answer) and
  // through libcurl alone.
  const bool direct = GENERATE(true, false);
  Objects objs(2);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.direct_http = direct;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  REQUIRE(reader->ReadWhole(server.Url("o1"), 1 << 20, &out).ok());
  CHECK(Str(out) == objs.data[1]);
  REQUIRE(reader->ReadRange(server.Url("o0"), 1000, 333, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(1000, 333));
  auto size = reader->Size(server.Url("o1"));
  REQUIRE(size.ok());
  CHECK(*size == objs.data[1].size());
  // Past the end: 416; overlapping the end: short, refused.
  absl::Status st = reader->ReadRange(server.Url("o0"), objs.data[0].size() + 5, 10, &out);
  CHECK(st.code() == absl::StatusCode::kOutOfRange);
  st = reader->ReadRange(server.Url("o0"), objs.data[0].size() - 5, 10, &out);
  CHECK(st.code() == absl::StatusCode::kOutOfRange);
  CHECK_THAT(std::string(st.message()), Catch::Contains("/o0"));
  st = reader->ReadWhole(server.Url("missing?token=SECRET"), 1 << 20, &out);
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK_FALSE(IsSystemError(st));
  CHECK_THAT(std::string(st.message()), Catch::Contains("/missing?…") && Catch::Contains("404"));
  CHECK(std::string(st.message()).find("SECRET") == std::string::npos);
  // Larger than the caller allows: the object's error.
  st = reader->ReadWhole(server.Url("o0"), 1000, &out);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(st.message()), Catch::Contains("/o0") && Catch::Contains("1000 bytes"));
  // The reader still works after each of those.
  REQUIRE(reader->ReadRange(server.Url("o1"), 7, 7000, &out).ok());
  CHECK(Str(out) == objs.data[1].substr(7, 7000));
  CHECK((reader->counters().direct_requests >= 6) == direct);
  CHECK(reader->counters().retries == 0);
}

TEST_CASE(
    "RemoteReader reuses its transfer handles: HEAD, range and whole reads in turn each get "
    "what they asked",
    "[remote_reader]") {
  // One connection, reads one after another: every transfer reuses the
  // handle the one before it released, with that one's settings (NOBODY of a
  // HEAD, a Range, a 404) still on it unless each transfer sets its own.
  const bool direct = GENERATE(true, false);
  Objects objs(2);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.max_connections_per_host = 1;
  o.direct_http = direct;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  for (int round = 0; round < 3; ++round) {
    auto size = reader->Size(server.Url("o0"));
    REQUIRE(size.ok());
    CHECK(*size == objs.data[0].size());
    REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[0]);  // not the empty body of a HEAD
    REQUIRE(reader->ReadRange(server.Url("o1"), 10 + round, 100, &out).ok());
    CHECK(Str(out) == objs.data[1].substr(10 + round, 100));
    REQUIRE(reader->ReadWhole(server.Url("o1"), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[1]);  // not the range asked before
    CHECK(reader->ReadWhole(server.Url("missing"), 1 << 20, &out).code() ==
          absl::StatusCode::kNotFound);
    REQUIRE(reader->ReadRange(server.Url("o0"), 0, 5, &out).ok());
    CHECK(Str(out) == objs.data[0].substr(0, 5));
  }
  CHECK(reader->counters().requests_started == 18);
  // GETs after libcurl's first answer (the first HEAD) go direct; HEADs
  // stay with libcurl.
  CHECK(reader->counters().direct_requests == (direct ? 15u : 0u));
}

TEST_CASE("RemoteReader fetches a run of parts with one request and serves each part's read",
          "[remote_reader]") {
  // The first two runs go through libcurl (it has not reached the host
  // yet), the rest through the direct client when it is on.
  const bool direct = GENERATE(true, false);
  Objects objs(1, 400 << 10);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.direct_http = direct;
  auto reader = Reader(o);
  const std::string url = server.Url("o0");
  using Range = ByteRangeReader::Range;
  // Three parts with small gaps: one request. A fourth 100 KiB past the
  // third: a request of its own.
  const std::vector<Range> parts = {{1000, 500}, {2000, 3000}, {5500, 1}, {110'000, 2000}};
  REQUIRE(reader->PrefetchRun(url, parts));
  std::vector<uint8_t> out;
  for (const Range& r : parts) {
    REQUIRE(reader->ReadRange(url, r.offset, r.length, &out).ok());
    CHECK(Str(out) == objs.data[0].substr(r.offset, r.length));
  }
  CHECK(reader->counters().requests_started == 2);
  CHECK(reader->counters().prefetch_hits == 4);
  CHECK(reader->counters().readahead_bytes == 0);
  // A part already on its way is left to its own request; a run of parts
  // that are all on their way starts nothing.
  REQUIRE(reader->Prefetch(url, 0, 10));
  REQUIRE(reader->PrefetchRun(url, std::vector<Range>{{0, 10}, {20, 10}}));
  REQUIRE(reader->PrefetchRun(url, std::vector<Range>{{0, 10}, {20, 10}}));
  REQUIRE(reader->ReadRange(url, 20, 10, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(20, 10));
  REQUIRE(reader->ReadRange(url, 0, 10, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(0, 10));
  CHECK(reader->counters().requests_started == 4);
  // Every part of a run that fails gets the run's error, naming the object.
  const std::string missing = server.Url("missing");
  REQUIRE(reader->PrefetchRun(missing, std::vector<Range>{{0, 10}, {20, 10}}));
  absl::Status st = reader->ReadRange(missing, 20, 10, &out);
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(st.message()), Catch::Contains("/missing"));
  CHECK(reader->ReadRange(missing, 0, 10, &out).code() == absl::StatusCode::kNotFound);
  // A run past the object's end (a shard cut short since it was indexed):
  // the parts it holds are read, the part it cut says so naming the object.
  const uint64_t size = objs.data[0].size();
  REQUIRE(reader->PrefetchRun(url, std::vector<Range>{{size - 20, 10}, {size - 5, 10}}));
  REQUIRE(reader->ReadRange(url, size - 20, 10, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(size - 20, 10));
  st = reader->ReadRange(url, size - 5, 10, &out);
  CHECK(st.code() == absl::StatusCode::kOutOfRange);
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("/o0: bytes [") &&
                 Catch::Contains("the object ends at byte " + std::to_string(size)));
  CHECK(reader->counters().readahead_bytes == 0);
  // 150 parts with gaps between them (more than one receive's worth of
  // destinations): one request, every part byte-exact.
  std::vector<Range> many;
  for (uint64_t i = 0; i < 150; ++i) many.push_back({50'000 + i * 700, 300 + i});
  const uint64_t before = reader->counters().requests_started;
  REQUIRE(reader->PrefetchRun(url, many));
  for (const Range& r : many) {
    REQUIRE(reader->ReadRange(url, r.offset, r.length, &out).ok());
    CHECK(Str(out) == objs.data[0].substr(r.offset, r.length));
  }
  CHECK(reader->counters().requests_started == before + 1);
  CHECK(reader->counters().readahead_bytes == 0);
  CHECK((reader->counters().direct_requests >= 5) == direct);
}

TEST_CASE("RemoteReader refuses a run past its read-ahead budget", "[remote_reader]") {
  Objects objs(1, 400 << 10);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.read_ahead_bytes = 100 << 10;
  auto reader = Reader(o);
  const std::string url = server.Url("o0");
  using Range = ByteRangeReader::Range;
  CHECK_FALSE(reader->PrefetchRun(url, std::vector<Range>{{0, 60 << 10}, {61 << 10, 60 << 10}}));
  CHECK(reader->counters().requests_started == 0);
  REQUIRE(reader->PrefetchRun(url, std::vector<Range>{{0, 40 << 10}, {41 << 10, 40 << 10}}));
  std::vector<uint8_t> out;
  REQUIRE(reader->ReadRange(url, 41 << 10, 40 << 10, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(41 << 10, 40 << 10));
  CHECK(reader->counters().readahead_bytes <= (40u << 10));
  REQUIRE(reader->ReadRange(url, 0, 40 << 10, &out).ok());
  CHECK(reader->counters().readahead_bytes == 0);
  CHECK(reader->counters().requests_started == 1);
}

TEST_CASE("RemoteReader cuts the range out of a server that ignores Range", "[remote_reader]") {
  // The direct client meets the 200 once and leaves the host to libcurl.
  const bool direct = GENERATE(true, false);
  Objects objs(1);
  ObjectServer server(objs.dir.path(), {"--ignore-range"});
  RemoteOptions o = FastRetries();
  o.direct_http = direct;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  // A whole read first: libcurl's answer gives the direct client the host.
  REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());
  CHECK(Str(out) == objs.data[0]);
  REQUIRE(reader->ReadRange(server.Url("o0"), 5000, 1234, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(5000, 1234));
  REQUIRE(reader->ReadRange(server.Url("o0"), 0, 10, &out).ok());
  CHECK(Str(out) == objs.data[0].substr(0, 10));
  CHECK(reader->ReadRange(server.Url("o0"), objs.data[0].size() - 5, 10, &out).code() ==
        absl::StatusCode::kOutOfRange);
  // A run's parts too.
  const std::vector<ByteRangeReader::Range> parts = {{7000, 100}, {7200, 3000}, {10'300, 7}};
  REQUIRE(reader->PrefetchRun(server.Url("o0"), parts));
  for (const auto& p : parts) {
    REQUIRE(reader->ReadRange(server.Url("o0"), p.offset, p.length, &out).ok());
    CHECK(Str(out) == objs.data[0].substr(p.offset, p.length));
  }
  CHECK(reader->counters().direct_requests == (direct ? 1u : 0u));
  CHECK(reader->counters().retries == 0);
}

TEST_CASE("RemoteReader retries 5xx and dropped connections: every read right once",
          "[remote_reader]") {
  const bool direct = GENERATE(true, false);
  Objects objs(40, 16 << 10);
  ObjectServer server(objs.dir.path(),
                      {"--fail-fraction", "0.25", "--drop-fraction", "0.2", "--seed", "11"});
  RemoteOptions o = FastRetries();
  o.max_attempts = 30;
  o.direct_http = direct;
  auto reader = Reader(o);
  for (int i = 0; i < 40; i += 2)
    reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20);
  // Runs too: a connection cut mid-body leaves parts half filled; the retry
  // must start them over.
  const std::vector<ByteRangeReader::Range> parts = {{1000, 5000}, {6100, 3000}, {9200, 50}};
  for (int i = 1; i < 40; i += 2) reader->PrefetchRun(server.Url("o" + std::to_string(i)), parts);
  std::vector<uint8_t> out;
  for (int i = 0; i < 40; ++i) {
    INFO(i);
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
    REQUIRE(reader->ReadRange(server.Url("o" + std::to_string(i)), 100, 200, &out).ok());
    CHECK(Str(out) == objs.data[i].substr(100, 200));
    for (const auto& p : parts) {
      REQUIRE(
          reader->ReadRange(server.Url("o" + std::to_string(i)), p.offset, p.length, &out).ok());
      CHECK(Str(out) == objs.data[i].substr(p.offset, p.length));
    }
  }
  CHECK(reader->counters().retries > 0);
  CHECK(reader->counters().prefetch_hits > 0);
  CHECK((reader->counters().direct_requests > 0) == direct);
}

// The count `name` in the object server's /__stats answer.
int ServerStat(RemoteReader& reader, const ObjectServer& server, const std::string& name) {
  std::vector<uint8_t> out;
  REQUIRE(reader.ReadWhole(server.Url("__stats"), 1 << 20, &out).ok());
  const std::string json = Str(out);
  const size_t at = json.find("\"" + name + "\": ");
  REQUIRE(at != std::string::npos);
  return std::stoi(json.substr(at + name.size() + 4));
}

TEST_CASE(
    "RemoteReader's direct client sends a request again on a new connection when the "
    "server closed the reused one, as the same attempt",
    "[remote_reader]") {
  // The server closes each connection unanswered at its second request, as
  // a server does that drops an idle keep-alive connection just as a request
  // arrives. One attempt per read: a counted failure would fail the read.
  Objects objs(10, 20 << 10);
  ObjectServer server(objs.dir.path(), {"--close-after-answers", "1"});
  RemoteOptions o = FastRetries();
  o.direct_http = true;
  o.max_attempts = 1;
  o.max_connections_per_host = 1;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  for (int i = 0; i < 10; ++i) {
    INFO(i);
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
  }
  CHECK(reader->counters().direct_requests >= 9);
  CHECK(reader->counters().retries == 0);
  CHECK(ServerStat(*reader, server, "closed") >= 8);  // the stale connections were met
}

TEST_CASE("RemoteReader's direct client leaves a host that sends chunked bodies to libcurl",
          "[remote_reader]") {
  Objects objs(6, 30 << 10);
  ObjectServer server(objs.dir.path(), {"--chunked"});
  RemoteOptions o = FastRetries();
  o.direct_http = true;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  for (int i = 0; i < 6; ++i) {
    INFO(i);
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
    REQUIRE(reader->ReadRange(server.Url("o" + std::to_string(i)), 999, 20'000, &out).ok());
    CHECK(Str(out) == objs.data[i].substr(999, 20'000));
  }
  // One try, then libcurl's for good; the read it was for is not lost.
  CHECK(reader->counters().direct_requests == 1);
  CHECK(reader->counters().retries == 0);
}

TEST_CASE(
    "RemoteReader's direct client gives up on an answer that does not come within "
    "request_timeout_ms: retried, then UNAVAILABLE naming the host",
    "[remote_reader]") {
  Objects objs(2);
  ObjectServer server(objs.dir.path(), {"--stall-after", "1"});
  RemoteOptions o = FastRetries();
  o.request_timeout_ms = 300;
  o.max_attempts = 2;
  o.direct_http = true;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  REQUIRE(
      reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());  // libcurl's: learns the address
  const absl::Status st = reader->ReadWhole(server.Url("o1"), 1 << 20, &out);
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(IsSystemError(st));
  CHECK_THAT(std::string(st.message()), Catch::Contains("/o1") && Catch::Contains("127.0.0.1:") &&
                                            Catch::Contains("2 attempts") &&
                                            Catch::Contains("timed out"));
  CHECK(reader->counters().direct_requests == 2);
  CHECK(reader->counters().retries == 1);
}

TEST_CASE("RemoteReader: the direct HTTP client is off unless asked for", "[remote_reader]") {
  CHECK_FALSE(RemoteOptions{}.direct_http);
  Objects objs(4, 10 << 10);
  ObjectServer server(objs.dir.path(), {});
  auto reader = Reader(RemoteOptions{});
  std::vector<uint8_t> out;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
  }
  CHECK(reader->counters().requests_started == 4);
  CHECK(reader->counters().direct_requests == 0);
}

TEST_CASE("RemoteReader: an unreachable host is retried, then UNAVAILABLE naming it",
          "[remote_reader]") {
  RemoteOptions o = FastRetries();
  o.max_attempts = 3;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  // Port 1 on loopback: nothing listens (connections refused).
  absl::Status st = reader->ReadWhole("http://127.0.0.1:1/x.jpg", 1 << 20, &out);
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(IsSystemError(st));
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("127.0.0.1:1") && Catch::Contains("3 attempts"));
  CHECK(reader->counters().retries == 2);
}

TEST_CASE("RemoteReader keeps hundreds of transfers in flight from no worker thread",
          "[remote_reader]") {
  Objects objs(200, 1024);
  ObjectServer server(objs.dir.path(), {"--latency-ms", "1500"});
  RemoteOptions o = FastRetries();
  o.max_connections_per_host = 512;
  o.adaptive_connections = false;  // 512 at once, not grown to from 4
  auto reader = Reader(o);
  for (int i = 0; i < 200; ++i) {
    REQUIRE(reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20));
  }
  // Every request sleeps 1.5 s in the server: they overlap or this never holds.
  CHECK(testing::Eventually([&] { return reader->counters().max_in_flight >= 150; },
                            std::chrono::seconds(60)));
  std::vector<uint8_t> out;
  for (int i = 0; i < 200; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
  }
}

TEST_CASE("RemoteReader halves a host's limit when it sheds load, and counts by host",
          "[remote_reader]") {
  Objects objs(24, 1000);
  // 503 to a request that comes while 2 others wait their 100 ms.
  ObjectServer server(objs.dir.path(), {"--latency-ms", "100", "--busy-above", "2"});
  RemoteOptions o = FastRetries();
  o.max_attempts = 30;
  auto reader = Reader(o);
  for (int i = 0; i < 24; ++i) reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20);
  std::vector<uint8_t> out;
  for (int i = 0; i < 24; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
  }
  const std::vector<HostStats> hosts = reader->host_stats();
  REQUIRE(hosts.size() == 1);
  const HostStats& h = hosts[0];
  CHECK(h.adaptive);
  CHECK(h.max_connections == o.max_connections_per_host);
  CHECK(h.attempts_by_status.at(200) == 24);
  const uint64_t busy = h.attempts_by_status.count(503) ? h.attempts_by_status.at(503) : 0;
  CHECK(busy > 0);  // started at 4 against a server that takes 2
  CHECK(h.retries == busy);
  CHECK(h.limit_decreases >= 1);
  CHECK(h.connection_limit <= 4);
  uint64_t bytes = 0;
  for (const std::string& d : objs.data) bytes += d.size();
  CHECK(h.bytes == bytes);  // the bodies of the 200s (a 503's is not counted)
  uint64_t timed = 0;
  for (const uint64_t n : h.latency_buckets) timed += n;
  CHECK(timed == 24 + busy);
}

TEST_CASE("RemoteReader with adaptive_connections off keeps its fixed limit", "[remote_reader]") {
  Objects objs(8, 100);
  ObjectServer server(objs.dir.path(), {"--fail-fraction", "0.5", "--seed", "4"});
  RemoteOptions o = FastRetries();
  o.max_attempts = 30;
  o.max_connections_per_host = 7;
  o.adaptive_connections = false;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
  }
  const std::vector<HostStats> hosts = reader->host_stats();
  REQUIRE(hosts.size() == 1);
  CHECK_FALSE(hosts[0].adaptive);
  CHECK(hosts[0].attempts_by_status.at(503) > 0);
  CHECK(hosts[0].connection_limit == 7);
  CHECK(hosts[0].limit_decreases == 0);
}

TEST_CASE("RemoteReader holds to its per-host connection limit and request rate",
          "[remote_reader]") {
  Objects objs(24, 1024);
  ObjectServer server(objs.dir.path(), {"--latency-ms", "50"});
  // One I/O thread, or three sharing the limits (a connection and 13.3/s each).
  const uint32_t threads = GENERATE(1u, 3u);
  RemoteOptions o = FastRetries();
  o.io_threads = threads;
  o.max_connections_per_host = 3;
  o.requests_per_second_per_host = 40;  // bursts of 4 at most
  auto reader = Reader(o);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 24; ++i) reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20);
  std::vector<uint8_t> out;
  for (int i = 0; i < 24; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
  }
  CHECK(reader->counters().max_in_flight <= 3);
  // 24 requests at 40/s after a burst of 4 take at least 0.5 s (a lower
  // bound: a loaded machine only makes it slower).
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(450));
}

// Threads of this process named `name` (/proc/self/task/*/comm).
int ThreadsNamed(const std::string& name) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
}

TEST_CASE(
    "RemoteReader with io_threads: that many I/O threads, every read right, prefetches "
    "claimed from the thread that made them",
    "[remote_reader]") {
  Objects objs(40, 20 << 10);
  ObjectServer server(objs.dir.path(), {});
  const int before = ThreadsNamed("remote-io");
  RemoteOptions o = FastRetries();
  o.io_threads = 3;
  {
    auto reader = Reader(o);
    CHECK(ThreadsNamed("remote-io") == before + 3);
    for (int i = 0; i < 40; i += 2) {
      REQUIRE(reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20));
    }
    const std::vector<ByteRangeReader::Range> run = {{100, 1000}, {2000, 500}, {4000, 3000}};
    REQUIRE(reader->PrefetchRun(server.Url("o1"), run));
    std::vector<uint8_t> out;
    for (int i = 0; i < 40; ++i) {
      INFO(i);
      REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
      CHECK(Str(out) == objs.data[i]);
    }
    for (const ByteRangeReader::Range& p : run) {
      REQUIRE(reader->ReadRange(server.Url("o1"), p.offset, p.length, &out).ok());
      CHECK(Str(out) == objs.data[1].substr(p.offset, p.length));
    }
    // Every prefetch was found by its read (20 whole objects, 3 parts).
    CHECK(reader->counters().prefetch_hits == 23);
    CHECK(reader->counters().requests_started == 20 + 1 + 20);
  }
  CHECK(ThreadsNamed("remote-io") == before);  // stopped with the reader
}

TEST_CASE("RemoteReader's read-ahead stays within its byte budget", "[remote_reader]") {
  Objects objs(64, 64 << 10);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.read_ahead_bytes = 512 << 10;
  auto reader = Reader(o);
  // Keep offering every object until nothing more is accepted or in flight.
  int accepted = 0;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 64; ++i) {
      accepted += reader->PrefetchWhole(server.Url("o" + std::to_string(i)), 1 << 20) ? 1 : 0;
    }
    CHECK(reader->counters().readahead_bytes <= o.read_ahead_bytes + (64 << 10) + 64);
    usleep(20'000);
  }
  CHECK(reader->counters().readahead_bytes <= o.read_ahead_bytes + (64 << 10) + 64);
  CHECK(reader->counters().readahead_bytes >= (256 << 10));  // it did read ahead
  std::vector<uint8_t> out;
  for (int i = 0; i < 64; ++i) {
    REQUIRE(reader->ReadWhole(server.Url("o" + std::to_string(i)), 1 << 20, &out).ok());
    CHECK(Str(out) == objs.data[i]);
  }
  CHECK(reader->counters().readahead_bytes == 0);
  CHECK(reader->counters().prefetch_hits >= 4);
}

TEST_CASE("RemoteReader never serves a 206 for another range: retried, then an error naming it",
          "[remote_reader]") {
  const bool direct = GENERATE(true, false);
  Objects objs(4, 32 << 10);
  std::vector<uint8_t> out;
  {
    // Every ranged answer is another range of the right length.
    ObjectServer server(objs.dir.path(), {"--wrong-content-range", "1"});
    RemoteOptions o = FastRetries();
    o.max_attempts = 3;
    o.direct_http = direct;
    auto reader = Reader(o);
    REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());  // (the host, for direct)
    const absl::Status st = reader->ReadRange(server.Url("o0?sig=SECRET"), 1000, 500, &out);
    INFO(st.message());
    CHECK(st.code() == absl::StatusCode::kUnavailable);
    CHECK(std::string(st.message()).find("o0") != std::string::npos);
    CHECK(std::string(st.message()).find("another range") != std::string::npos);
    CHECK(std::string(st.message()).find("bytes 1000-1499 asked") != std::string::npos);
    CHECK(std::string(st.message()).find("SECRET") == std::string::npos);
    CHECK(IsSystemError(st));
    CHECK((reader->counters().direct_requests > 0) == direct);
  }
  {
    // Half of them: the retries get every range right, runs too.
    ObjectServer server(objs.dir.path(), {"--wrong-content-range", "0.5", "--seed", "2"});
    RemoteOptions o = FastRetries();
    o.max_attempts = 40;
    o.direct_http = direct;
    auto reader = Reader(o);
    REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());
    const std::vector<ByteRangeReader::Range> parts = {{100, 900}, {1200, 3000}, {4300, 77}};
    for (int i = 0; i < 4; ++i) {
      INFO(i);
      const std::string url = server.Url("o" + std::to_string(i));
      REQUIRE(reader->PrefetchRun(url, parts));
      for (const auto& p : parts) {
        REQUIRE(reader->ReadRange(url, p.offset, p.length, &out).ok());
        CHECK(Str(out) == objs.data[i].substr(p.offset, p.length));
      }
      REQUIRE(reader->ReadRange(url, 20'000, 4096, &out).ok());
      CHECK(Str(out) == objs.data[i].substr(20'000, 4096));
    }
    CHECK(ServerStat(*reader, server, "wrong_ranges") > 0);
    CHECK(reader->counters().retries > 0);
  }
}

TEST_CASE("RemoteReader refuses ranges of an object whose size changed since its HEAD",
          "[remote_reader]") {
  const bool direct = GENERATE(true, false);
  Objects objs(1, 32 << 10);
  ObjectServer server(objs.dir.path(), {});
  RemoteOptions o = FastRetries();
  o.max_attempts = 2;
  o.direct_http = direct;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());
  auto size = reader->Size(server.Url("o0"));
  REQUIRE(size.ok());
  REQUIRE(reader->ReadRange(server.Url("o0"), 10, 100, &out).ok());
  // Replaced by another object with more bytes: its ranges are not the
  // bytes the index was built from.
  std::ofstream(objs.dir.path() + "/o0", std::ios::binary) << objs.data[0] << "more bytes";
  const absl::Status st = reader->ReadRange(server.Url("o0"), 10, 100, &out);
  INFO(st.message());
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(st.message()).find("another size") != std::string::npos);
}

TEST_CASE(
    "remote.failed_object: sample makes an object that always fails an error of its sample "
    "while the host answers others; a host that answers nothing stays an error of the system",
    "[remote_reader]") {
  Objects objs(3, 8 << 10);
  ObjectServer server(objs.dir.path(), {"--fail-path", "o1"});
  const bool sample = GENERATE(true, false);
  RemoteOptions o = FastRetries();
  o.max_attempts = 3;
  o.failed_object =
      sample ? RemoteOptions::FailedObject::kSample : RemoteOptions::FailedObject::kStream;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  // Nothing answered yet on this host: as before, an error of the system.
  absl::Status st = reader->ReadWhole(server.Url("o1"), 1 << 20, &out);
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(IsSystemError(st));
  REQUIRE(reader->ReadWhole(server.Url("o0"), 1 << 20, &out).ok());
  st = reader->ReadWhole(server.Url("o1"), 1 << 20, &out);
  INFO(st.message());
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(st.message()).find("o1") != std::string::npos);
  CHECK(std::string(st.message()).find("HTTP 503") != std::string::npos);
  CHECK(IsSystemError(st) == !sample);
  // The host keeps answering the others.
  REQUIRE(reader->ReadWhole(server.Url("o2"), 1 << 20, &out).ok());
  CHECK(Str(out) == objs.data[2]);
  CHECK(ServerStat(*reader, server, "path_failed") == 6);
}

TEST_CASE(
    "remote.failed_object: sample leaves a host that fails every object an error of the "
    "system",
    "[remote_reader]") {
  Objects objs(3, 8 << 10);
  ObjectServer server(objs.dir.path(), {"--fail-path", "/o"});
  RemoteOptions o = FastRetries();
  o.max_attempts = 3;
  o.failed_object = RemoteOptions::FailedObject::kSample;
  auto reader = Reader(o);
  std::vector<uint8_t> out;
  REQUIRE(reader->ReadWhole(server.Url("__stats"), 1 << 20, &out).ok());  // it answered once
  // Then every object fails: two of them at once.
  REQUIRE(reader->PrefetchWhole(server.Url("o0"), 1 << 20));
  REQUIRE(reader->PrefetchWhole(server.Url("o1"), 1 << 20));
  const absl::Status a = reader->ReadWhole(server.Url("o0"), 1 << 20, &out);
  const absl::Status b = reader->ReadWhole(server.Url("o1"), 1 << 20, &out);
  CHECK(a.code() == absl::StatusCode::kUnavailable);
  CHECK(b.code() == absl::StatusCode::kUnavailable);
  // (The first to give up may have seen only its own failures.)
  CHECK((IsSystemError(a) || IsSystemError(b)));
}

// What an asynchronous read's done was called with, from whichever thread.
struct DoneLog {
  std::mutex mu;
  std::vector<absl::Status> calls;
  ReadDone Callback() {
    return [this](absl::Status st) {
      std::lock_guard<std::mutex> l(mu);
      calls.push_back(std::move(st));
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> l(mu);
    return calls.size();
  }
  absl::Status first() {
    std::lock_guard<std::mutex> l(mu);
    return calls.front();
  }
};

TEST_CASE("RemoteReader's asynchronous reads complete on the I/O thread with the bytes",
          "[remote_reader][async]") {
  Objects objs(2);
  ObjectServer server(objs.dir.path(), {"--latency-ms", "20"});
  auto reader = Reader(FastRetries());
  REQUIRE(reader->reads_asynchronously());
  std::vector<uint8_t> range, whole;
  DoneLog a, b;
  std::shared_ptr<PendingRead> pa =
      reader->ReadRangeAsync(server.Url("o0"), 1000, 333, &range, a.Callback());
  std::shared_ptr<PendingRead> pb =
      reader->ReadWholeAsync(server.Url("o1"), 1 << 20, &whole, b.Callback());
  REQUIRE(testing::Eventually([&] { return a.count() == 1 && b.count() == 1; }));
  CHECK(a.first().ok());
  CHECK(b.first().ok());
  CHECK(Str(range) == objs.data[0].substr(1000, 333));
  CHECK(Str(whole) == objs.data[1]);
  // A read whose prefetch already arrived completes before the call returns.
  REQUIRE(reader->PrefetchWhole(server.Url("o0"), 1 << 20));
  REQUIRE(testing::Eventually([&] { return reader->counters().readahead_bytes > 0; }));
  DoneLog c;
  std::vector<uint8_t> warm;
  CHECK(reader->ReadWholeAsync(server.Url("o0"), 1 << 20, &warm, c.Callback()) == nullptr);
  CHECK(c.count() == 1);
  CHECK(Str(warm) == objs.data[0]);
  // Errors come through done too, naming the object without its query.
  DoneLog d;
  std::vector<uint8_t> none;
  reader->ReadWholeAsync(server.Url("missing?token=SECRET"), 1 << 20, &none, d.Callback());
  REQUIRE(testing::Eventually([&] { return d.count() == 1; }));
  CHECK(d.first().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(d.first().message()).find("SECRET") == std::string::npos);
}

TEST_CASE("RemoteReader: a slow read shows its progress; cancel and destruction end it at once",
          "[remote_reader][async]") {
  Objects objs(2, 4096);
  ObjectServer server(objs.dir.path(), {"--trickle-body-ms", "50"});
  auto reader = Reader(FastRetries());
  std::vector<uint8_t> out = {1, 2, 3};
  DoneLog log;
  std::shared_ptr<PendingRead> p =
      reader->ReadWholeAsync(server.Url("o0?sig=SECRET"), 1 << 20, &out, log.Callback());
  REQUIRE(p != nullptr);
  REQUIRE(testing::Eventually([&] { return p->progress().bytes_received >= 2; }));
  const PendingRead::Progress pr = p->progress();
  CHECK(pr.host == server.Url("").substr(7, server.Url("").size() - 8));
  CHECK_THAT(pr.object, Catch::Contains("/o0"));
  CHECK(pr.object.find("SECRET") == std::string::npos);
  CHECK(log.count() == 0);
  p->Cancel();
  REQUIRE(log.count() == 1);  // at once, on this thread
  CHECK(log.first().code() == absl::StatusCode::kCancelled);
  p->Cancel();  // nothing more
  CHECK(log.count() == 1);
  CHECK(out == std::vector<uint8_t>{1, 2, 3});  // never written

  // A read still pending when the reader goes fails with CANCELLED.
  DoneLog gone;
  std::vector<uint8_t> out2;
  std::shared_ptr<PendingRead> q =
      reader->ReadWholeAsync(server.Url("o1"), 1 << 20, &out2, gone.Callback());
  REQUIRE(q != nullptr);
  q.reset();
  reader.reset();
  REQUIRE(gone.count() == 1);
  CHECK(gone.first().code() == absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace conveyor::remote
#endif  // CONVEYOR_HAVE_SERVER
