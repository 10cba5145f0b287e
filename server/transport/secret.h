// Stream secrets: the 32 random bytes a client proves it owns a stream with
// when it fetches the stream's memfd (fd hand-over socket) or connects its
// data socket. Handed out in StreamOpened over gRPC.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace conveyor::server {

inline constexpr size_t kSecretBytes = 32;
using Secret = std::array<uint8_t, kSecretBytes>;

// Fills `secret` from the kernel's random source (getrandom).
absl::Status NewSecret(Secret* secret);

// Compares every byte whatever the first difference, so the time taken says
// nothing about how much of a guess was right (OpenSSL's CRYPTO_memcmp).
bool ConstantTimeEqual(const Secret& a, const Secret& b);

}  // namespace conveyor::server
