// Dataset file names that are not valid UTF-8 or hold control characters,
// failing under error_policy skip, through the service's gRPC adapter: the
// Batch names them escaped (core/base/text_escape.h), so the message is valid
// for a proto3 string and the stream goes on. Compiled only with the server
// library.
#ifdef CONVEYOR_HAVE_SERVER

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "conveyor/v1/conveyor.grpc.pb.h"
#include "core/base/text_escape.h"
#include "tests/unit/service_test_util.h"

namespace conveyor::server {
namespace {

TEST_CASE("service over gRPC: failing files with hostile names are named escaped, stream goes on",
          "[service][grpc][text_escape]") {
  ServiceFixtureOptions o;
  o.error_policy = ErrorPolicy::kSkip;
  o.corrupt_names = {"bad\xff\xfe.jpg", "evil\n2026-01-01 00:00:00.000 E forged.jpg"};
  ServiceFixture t(o);
  // 6 good images and 2 failing ones: one batch of 16 holds the epoch.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto stream = t.stub->StreamBatches(&context);
  REQUIRE(stream->Write(OpenMessage(Request(16, v1::INLINE))));
  std::vector<v1::Batch> batches;
  bool ended = false;
  v1::ServerMessage m;
  while (!ended && stream->Read(&m)) {
    if (m.has_batch()) {
      batches.push_back(m.batch());
      REQUIRE(stream->Write(ReleaseMessage(m.batch().slot())));
    }
    ended = m.has_end();
  }
  stream->WritesDone();
  while (stream->Read(&m)) {
  }
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  CHECK(status.ok());
  CHECK(ended);
  REQUIRE(batches.size() == 1);
  const v1::Batch& b = batches[0];
  CHECK(b.num_samples() == 6);
  REQUIRE(b.failures_size() == 2);
  std::vector<std::string> paths;
  for (const v1::SampleFailure& f : b.failures()) {
    INFO(f.path() << ": " << f.reason());
    CHECK(IsValidUtf8(f.path()));
    CHECK(IsValidUtf8(f.reason()));
    CHECK(f.reason().find('\n') == std::string::npos);
    paths.push_back(f.path());
  }
  CHECK(paths == std::vector<std::string>{"class_1/bad\\xff\\xfe.jpg",
                                          "class_1/evil\\n2026-01-01 00:00:00.000 E forged.jpg"});
  // Serializing checks proto3 strings for UTF-8 (and fails in debug builds).
  std::string bytes;
  CHECK(b.SerializeToString(&bytes));
  v1::Batch parsed;
  CHECK(parsed.ParseFromString(bytes));
  CHECK(parsed.failures_size() == 2);
}

TEST_CASE("service: an unknown pipeline's name is echoed escaped and capped",
          "[service][text_escape]") {
  ServiceFixture t;
  v1::OpenStream r = Request();
  r.set_pipeline(std::string(100000, 'n') + "\n");
  auto session = t.service->OpenStream(r, kUnixPeer, [] {});
  REQUIRE(session.status().code() == absl::StatusCode::kNotFound);
  const std::string msg(session.status().message());
  CHECK(msg.size() < 1024);
  CHECK(msg.find("(100001 bytes)") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.find("this daemon serves: test") != std::string::npos);
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
