// Catch2 2.x entry point for conveyor_unit_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
