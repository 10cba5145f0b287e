// Catch2 2.x entry point for conveyor_unit_tests.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // spdlog's registry is a function-local static inside Debian's libspdlog,
  // which is not built with ThreadSanitizer: made lazily by the first worker
  // thread that logs, TSan cannot see the other workers wait for it and
  // reports a race. Making it here, before any test starts a thread, orders
  // it before them all (conveyord does the same when it sets up logging).
  spdlog::default_logger();
  return Catch::Session().run(argc, argv);
}
