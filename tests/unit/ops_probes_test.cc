// Tests of the daemon's operations helpers (server/ops): the process_*
// figures parsed from /proc/<pid>/stat and read from /proc/self, the
// build-info family, gRPC's and protobuf's own lines routed through the
// daemon's log (server/ops/grpc_logging.h), and the metrics listener's
// /healthz and /readyz (server/ops/metrics_http_server.h). A real daemon's
// figures and probes: tests/integration/test_metrics.py.
#ifdef CONVEYOR_HAVE_SERVER

#include <arpa/inet.h>
#include <grpc/support/log.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/unique_fd.h"
#include "google/protobuf/stubs/logging.h"
#include "server/ops/build_info.h"
#include "server/ops/grpc_logging.h"
#include "server/ops/logging.h"
#include "server/ops/metrics_http_server.h"
#include "server/ops/process_metrics.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {
namespace {

TEST_CASE("process metrics: /proc/PID/stat fields, a comm with spaces and parentheses",
          "[metrics]") {
  // Fields 3.. after "(comm)"; utime 14 = 250 ticks, stime 15 = 50, threads
  // 20 = 7, starttime 22 = 1000 ticks, vsize 23, rss 24 = 300 pages.
  const std::string stat =
      "1234 (conv yord) (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 "
      "104857600 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
  ProcessFigures p;
  REQUIRE(ParseProcStat(stat, 100, 4096, 1'700'000'000, &p));
  CHECK(*p.cpu_seconds == Approx(3.0));
  CHECK(*p.threads == 7);
  CHECK(*p.virtual_bytes == 104857600);
  CHECK(*p.resident_bytes == 300 * 4096);
  CHECK(*p.start_time_seconds == Approx(1'700'000'010.0));

  ProcessFigures none;
  CHECK_FALSE(ParseProcStat("1234 (short) S 1 2 3", 100, 4096, 1, &none));
  CHECK_FALSE(none.cpu_seconds.has_value());
  CHECK_FALSE(ParseProcStat("no parenthesis at all", 100, 4096, 1, &none));
}

TEST_CASE("process metrics: this process's figures, in the collector's names", "[metrics]") {
  const ProcessFigures p = ReadProcessFigures();
  REQUIRE(p.resident_bytes.has_value());
  CHECK(*p.resident_bytes > 0);
  CHECK(*p.virtual_bytes >= *p.resident_bytes);
  CHECK(*p.threads >= 1);
  CHECK(*p.open_fds >= 3);  // stdin, stdout, stderr at least
  CHECK(*p.max_fds >= *p.open_fds);
  const double now = static_cast<double>(time(nullptr));
  CHECK(*p.start_time_seconds <= now + 1);
  CHECK(*p.start_time_seconds > now - 24 * 3600);  // a test process is young
  const std::string text = RenderProcessMetrics(p);
  for (const char* name : {"process_cpu_seconds_total", "process_resident_memory_bytes",
                           "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                           "process_start_time_seconds", "process_threads"}) {
    INFO(name);
    CHECK(text.find(absl::StrCat("# TYPE ", name, " ")) != std::string::npos);
    CHECK(std::regex_search(text, std::regex(absl::StrCat("\n", name, " [0-9.]+\n"))));
  }
  CHECK(text.find("# TYPE process_cpu_seconds_total counter") != std::string::npos);
  // Nothing made up for figures that could not be read.
  CHECK(RenderProcessMetrics(ProcessFigures{}).empty());
}

TEST_CASE("build info: version and revision as labels of a gauge of 1", "[metrics]") {
  CHECK(!BuildVersion().empty());
  CHECK(!BuildRevision().empty());
  CHECK(RenderBuildInfo("1.2.3", "abc\"def") ==
        "# HELP conveyor_build_info The conveyord build: its version and the git revision it was "
        "built from; always 1.\n# TYPE conveyor_build_info gauge\n"
        "conveyor_build_info{version=\"1.2.3\",revision=\"abc\\\"def\"} 1\n");
}

// Keeps what the loggers it is attached to format.
class CaptureSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines;

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    lines.emplace_back(buf.data(), buf.size());
  }
  void flush_() override {}
};

TEST_CASE("grpc logging: gRPC's and protobuf's lines are the daemon's JSON lines", "[logging]") {
  auto sink = std::make_shared<CaptureSink>();
  auto before = spdlog::default_logger();
  spdlog::drop("grpc");
  spdlog::drop("protobuf");
  auto logger = std::make_shared<spdlog::logger>("conveyord-test", sink);
  logger->set_formatter(std::make_unique<JsonLogFormatter>());
  logger->set_level(spdlog::level::info);
  spdlog::set_default_logger(logger);
  RouteGrpcLogs("json", "info");

  gpr_log(GPR_ERROR, "Handshake failed with fatal error %s: \"%s\"", "SSL_ERROR_SSL", "bad\x01");
  gpr_log(GPR_DEBUG, "not shown at info");
  GOOGLE_LOG(WARNING) << "protobuf says so";

  REQUIRE(sink->lines.size() == 2);
  const std::string& g = sink->lines[0];
  INFO(g);
  CHECK(g.rfind(R"({"ts":")", 0) == 0);
  CHECK(g.find(R"("level":"error","logger":"grpc")") != std::string::npos);
  CHECK(g.find(R"("msg":"Handshake failed with fatal error SSL_ERROR_SSL: \"bad\\x01\"")") !=
        std::string::npos);
  CHECK(
      std::regex_search(g, std::regex(R"("file":"[^"]*ops_probes_test\.cc","line":[0-9]+\}\n$)")));
  const std::string& p = sink->lines[1];
  INFO(p);
  CHECK(p.find(R"("level":"warning","logger":"protobuf","thread":)") != std::string::npos);
  CHECK(p.find(R"("msg":"protobuf says so")") != std::string::npos);

  // Debug level: gRPC's debug lines too.
  SetGrpcLogLevel("debug");
  spdlog::set_level(spdlog::level::debug);
  gpr_log(GPR_DEBUG, "shown at debug");
  CHECK(sink->lines.size() == 3);
  SetGrpcLogLevel("info");
  spdlog::set_level(spdlog::level::info);

  // Back to gRPC's own writer for the other tests.
  gpr_set_log_function(nullptr);
  google::protobuf::SetLogHandler(nullptr);
  spdlog::drop("grpc");
  spdlog::drop("protobuf");
  spdlog::set_default_logger(before);
}

// "CODE BODY" of one HTTP GET of `path` on 127.0.0.1:`port`.
std::string Get(int port, const std::string& path) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  REQUIRE(fd.get() >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: x\r\n\r\n");
  REQUIRE(::write(fd.get(), request.data(), request.size()) ==
          static_cast<ssize_t>(request.size()));
  std::string reply;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof(buf))) > 0;) reply.append(buf, n);
  const size_t body = reply.find("\r\n\r\n");
  REQUIRE(reply.rfind("HTTP/1.1 ", 0) == 0);
  REQUIRE(body != std::string::npos);
  return absl::StrCat(reply.substr(9, 3), " ", reply.substr(body + 4));
}

TEST_CASE("metrics endpoint: /healthz answers, /readyz follows the readiness", "[metrics]") {
  std::atomic<int> state{0};  // 0 starting, 1 ready, 2 draining
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server = MetricsHttpServer::Start(
      "127.0.0.1:0", [] { return std::string("conveyor_x 1\n"); },
      [&state]() -> std::string {
        switch (state.load()) {
          case 0: return "starting";
          case 1: return "";
          default: return "shutting down (draining streams)";
        }
      });
  REQUIRE(server.ok());
  const int port = (*server)->port();
  CHECK(Get(port, "/healthz") == "200 ok\n");
  CHECK(Get(port, "/readyz") == "503 not ready: starting\n");
  state = 1;
  CHECK(Get(port, "/readyz") == "200 ready\n");
  CHECK(Get(port, "/healthz") == "200 ok\n");
  CHECK(Get(port, "/metrics") == "200 conveyor_x 1\n");
  state = 2;
  CHECK(Get(port, "/readyz") == "503 not ready: shutting down (draining streams)\n");
  CHECK(Get(port, "/readyz/x").substr(0, 3) == "404");
  CHECK(Get(port, "/healthzz").substr(0, 3) == "404");

  // Without a readiness function: ready as long as it answers.
  absl::StatusOr<std::unique_ptr<MetricsHttpServer>> plain =
      MetricsHttpServer::Start("127.0.0.1:0", [] { return std::string(); });
  REQUIRE(plain.ok());
  CHECK(Get((*plain)->port(), "/readyz") == "200 ready\n");
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
