// GPU UUIDs as the client names a GPU: `nvidia-smi -L` prints
// "GPU-8c5b0c1e-6f1d-4c1e-9d2a-0123456789ab"; the driver gives 16 bytes
// (cuDeviceGetUuid). Two spellings name the same GPU when they are equal
// ignoring letter case and a leading "GPU-" (the daemon matches the same
// way, see DeviceRequest in the proto).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace conveyor::client {

// "GPU-" and the 16 bytes as lowercase hex in 8-4-4-4-12 groups.
std::string FormatGpuUuid(const unsigned char bytes[16]);

// `uuid` in lowercase without a leading "GPU-" (any case) and without
// surrounding spaces.
std::string NormalizeGpuUuid(std::string_view uuid);

// Whether `a` and `b` name the same GPU (see the top of this file).
bool SameGpuUuid(std::string_view a, std::string_view b);

}  // namespace conveyor::client
