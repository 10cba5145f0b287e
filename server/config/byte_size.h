// Byte sizes as people write them in conveyord's config and flags: "512MiB",
// "2GB", "1.5 KiB", and for the memory budget also "25%" of a whole that the
// caller supplies (the machine's memory). Pure text → number: nothing here
// asks the system anything.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace conveyor::server {

// A non-negative integer or decimal followed by an optional unit: B;
// KiB/MiB/GiB/TiB (or K/M/G/T, or Ki/Mi/Gi/Ti: powers of 1024); KB/MB/GB/TB
// (powers of 1000); units are case-insensitive. InvalidArgument saying what
// is wrong with `text` ("N%" is refused: "a percentage is not allowed here").
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

// As ParseByteSize, and "N%" (0 < N <= 100) is N percent of `whole` bytes.
absl::StatusOr<uint64_t> ParseByteSizeOrPercent(const std::string& text, uint64_t whole);

}  // namespace conveyor::server
