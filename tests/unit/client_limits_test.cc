// Per-client shares (server/service/client_limits.h).
#include "server/service/client_limits.h"

#include <catch2/catch.hpp>

namespace conveyor::server {
namespace {

TEST_CASE("client limits: each limit refuses with its name and figures, others unaffected",
          "[client_limits]") {
  ClientUsage u;
  const ClientLimits limits{.max_streams = 2, .max_credits = 6, .max_bytes = 1000};
  REQUIRE(u.Reserve("uid:1000", 4, 400, limits).ok());
  // Credits: 4 + 4 > 6.
  absl::Status st = u.Reserve("uid:1000", 4, 100, limits);
  CHECK(absl::IsResourceExhausted(st));
  CHECK(st.message().find("per_client.max_credits is 6") != std::string::npos);
  CHECK(st.message().find("holds 4 credits") != std::string::npos);
  // Bytes: 400 + 700 > 1000.
  st = u.Reserve("uid:1000", 2, 700, limits);
  CHECK(absl::IsResourceExhausted(st));
  CHECK(st.message().find("per_client.max_memory is 1000 bytes") != std::string::npos);
  REQUIRE(u.Reserve("uid:1000", 2, 600, limits).ok());
  // Streams: 2 open.
  st = u.Reserve("uid:1000", 0, 0, limits);
  CHECK(absl::IsResourceExhausted(st));
  CHECK(st.message().find("client uid:1000 has 2 streams open, per_client.max_streams is 2") !=
        std::string::npos);
  // Another client has its own share.
  CHECK(u.Reserve("uid:1001", 6, 1000, limits).ok());
  CHECK(u.Of("uid:1000").streams == 2);
  CHECK(u.Of("uid:1000").credits == 6);
  u.Release("uid:1000", 4, 400);
  CHECK(u.Reserve("uid:1000", 4, 400, limits).ok());
  u.Release("uid:1000", 4, 400);
  u.Release("uid:1000", 2, 600);
  u.Release("uid:1001", 6, 1000);
  CHECK(u.clients() == 0);
}

TEST_CASE("client limits: zero means no limit", "[client_limits]") {
  ClientUsage u;
  for (int i = 0; i < 100; ++i) REQUIRE(u.Reserve("host:ipv4:10.0.0.1", 64, 1ull << 40, {}).ok());
  CHECK(u.Of("host:ipv4:10.0.0.1").streams == 100);
}

}  // namespace
}  // namespace conveyor::server
