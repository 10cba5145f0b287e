#include "tests/support/tool_files.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

namespace conveyor::testing {
namespace {

[[noreturn]] void Exit(const char* tool, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", tool, message.c_str());
  std::exit(2);
}

}  // namespace

std::vector<uint8_t> ReadFileOrExit(const char* tool, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Exit(tool, "cannot read " + path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) Exit(tool, "cannot read " + path);
  return bytes;
}

void WriteFileOrExit(const char* tool, const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) Exit(tool, "cannot write " + path);
}

}  // namespace conveyor::testing
