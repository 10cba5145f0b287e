// ReadConfigReadme: the text of config/README.md, for unit tests that check
// the documentation against the code (the config schema, the extension
// tables). The source tree is $CONVEYOR_SOURCE_DIR, else the one the tests
// were built from (CONVEYOR_SOURCE_DIR, defined for the unit-test target).
// Thread-safety: a pure function.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace conveyor::testing {

inline std::string ReadConfigReadme() {
  const char* dir = std::getenv("CONVEYOR_SOURCE_DIR");
  const std::string root = dir != nullptr ? dir : CONVEYOR_SOURCE_DIR;
  std::ifstream in(root + "/config/README.md");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace conveyor::testing
