// Whole-file reads and writes for the test tools (tests/tools). A failure
// ends the tool as they all end: "TOOL: message" on stderr, exit status 2.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace conveyor::testing {

// The file's bytes; exits the tool when it cannot be opened or read.
std::vector<uint8_t> ReadFileOrExit(const char* tool, const std::string& path);
// Writes `bytes` as the whole file; exits the tool when it cannot.
void WriteFileOrExit(const char* tool, const std::string& path, std::span<const uint8_t> bytes);

}  // namespace conveyor::testing
