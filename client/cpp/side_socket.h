// The client's side of the daemon's side sockets (see StreamOpened in
// proto/conveyor/v1/conveyor.proto): both start with the same handshake —
// connect, send the 8-byte little-endian stream id then the 32-byte secret,
// read one status byte (0 accepted, 1 refused, 2 the daemon is out of
// resources for the moment).
//   - SHARED_MEMORY: the fd hand-over socket (unix) answers with the
//     region's memfd as SCM_RIGHTS ancillary data on the status byte.
//   - DATA_SOCKET: the data socket (TCP) then carries, for every Batch
//     message in order, exactly that batch's images_bytes bytes.
// Every socket gets send and receive timeouts (connect included), so a
// silent daemon becomes an Unavailable error, never a hang.
//
// Errors: Unavailable when the daemon cannot be reached, is busy (status 2)
// or a connection breaks (retryable); FailedPrecondition when it refuses the
// handshake (the stream is gone or the secret is wrong).
//
// Thread-safety: free functions; each call owns the sockets it makes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/unique_fd.h"

namespace conveyor::client {

inline constexpr size_t kSecretBytes = 32;

// Performs the fd hand-over on the unix socket `fd_socket`; returns the
// region's memfd.
absl::StatusOr<UniqueFd> ReceiveRegionFd(const std::string& fd_socket, uint64_t stream_id,
                                         absl::string_view secret, absl::Duration timeout);

// Connects to the data socket at host:port (a name or an IPv4/IPv6
// literal), makes the handshake and returns the connection, whose receive
// timeout is then `read_timeout` (a daemon silent that long in the middle of
// a batch is gone).
absl::StatusOr<UniqueFd> ConnectDataSocket(const std::string& host, uint32_t port,
                                           uint64_t stream_id, absl::string_view secret,
                                           absl::Duration timeout, absl::Duration read_timeout);

// Reads exactly `length` bytes of `fd` into `out`. Unavailable (naming
// `where` and how far it got) when the connection closes, fails or times
// out first.
absl::Status ReadFull(int fd, uint8_t* out, size_t length, absl::string_view where);

}  // namespace conveyor::client
