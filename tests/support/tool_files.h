// Whole-file reads and writes for the test tools (tests/tools), which turn a
// failure into their own "TOOL: message" and exit status 2. Thread-safety:
// plain functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace conveyor::testing {

// The file's bytes, or nullopt when it cannot be opened or read.
std::optional<std::vector<uint8_t>> ReadWholeFile(const std::string& path);
// Writes `bytes` as the whole file; false when it cannot be written.
bool WriteWholeFile(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace conveyor::testing
