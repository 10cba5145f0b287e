// ReadWholeFile: the Fetch stage's primitive. Reads a file whole into a
// caller-owned buffer whose capacity is reused across calls (no per-sample
// allocation once buffers have grown to the largest file). Stateless and
// thread-safe; the fd is owned by RAII inside the call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace conveyor {

// Files larger than max_bytes are refused (ResourceExhausted) before reading.
absl::Status ReadWholeFile(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* out);

}  // namespace conveyor
