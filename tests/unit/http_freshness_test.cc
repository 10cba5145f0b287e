// FreshSeconds: how long an HTTP answer says it stays fresh, read as a
// shared cache reads Cache-Control and Age (RFC 9111, 4.2.1 and 5.2.2).
#include "remote/http_freshness.h"

#include "catch2/catch.hpp"

namespace conveyor::remote {
namespace {

TEST_CASE("FreshSeconds: max-age, s-maxage over it, less the Age", "[http_freshness]") {
  CHECK(FreshSeconds("max-age=60", "") == 60);
  CHECK(FreshSeconds("public, max-age=3600", "") == 3600);
  CHECK(FreshSeconds("Max-Age = 60", "") == 60);
  CHECK(FreshSeconds("max-age=\"60\"", "") == 60);
  CHECK(FreshSeconds("max-age=60, s-maxage=10", "") == 10);
  CHECK(FreshSeconds("s-maxage=10, max-age=60", "") == 10);
  CHECK(FreshSeconds("max-age=60", "15") == 45);
  CHECK(FreshSeconds("max-age=60", "60") == 0);
  CHECK(FreshSeconds("max-age=60", "600") == 0);
  // Capped at a year, however many digits.
  CHECK(FreshSeconds("max-age=99999999999999999999", "") == 365ull * 24 * 3600);
}

TEST_CASE(
    "FreshSeconds: no freshness without a lifetime, with no-cache or no-store, or when "
    "malformed",
    "[http_freshness]") {
  CHECK(FreshSeconds("", "") == 0);
  CHECK(FreshSeconds("public", "") == 0);
  CHECK(FreshSeconds("max-age=60, no-cache", "") == 0);
  CHECK(FreshSeconds("no-cache=\"Set-Cookie\", max-age=60", "") == 0);
  CHECK(FreshSeconds("no-store, max-age=60", "") == 0);
  CHECK(FreshSeconds("max-age=-1", "") == 0);
  CHECK(FreshSeconds("max-age=", "") == 0);
  CHECK(FreshSeconds("max-age=1e3", "") == 0);
  CHECK(FreshSeconds("max-age=60", "soon") == 0);
  CHECK(FreshSeconds("max-age", "") == 0);
}

}  // namespace
}  // namespace conveyor::remote
