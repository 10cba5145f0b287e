// ClientTransport: how the C++ client reaches the image bytes of a stream's
// batches — one object per transport kind, as the daemon has one
// StreamTransport per kind:
//   - SharedMemoryTransport (SHARED_MEMORY): the memfd, mapped once,
//     optionally page-locked for CUDA (pin_memory);
//   - DataSocketTransport (DATA_SOCKET): the TCP data socket and a buffer
//     per slot;
//   - InlineTransport (INLINE): the bytes of the Batch message;
//   - DeviceMemoryTransport (DEVICE_MEMORY): the daemon's device ring,
//     imported with the CUDA driver (or mmap'ed from the daemon's host
//     model, a test aid).
// OpenClientTransport (open_transport.h) makes the one StreamOpened names.
// Opening is the constructor's job (Open functions), View() locates one
// batch's bytes, and closing is destruction (RAII: unregister, unmap,
// close), which happens once the stream and every lease of it are gone.
//
// Thread-safety: View() is called by the stream's consumer thread only,
// for a slot the caller does not hold; the BatchBytes it returns stay valid
// (read-only, from any thread) until the transport is destroyed or the
// slot is filled again (after its Release). CopyToHost() is const and may
// be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cpp/cuda/cuda_driver.h"
#include "conveyor/v1/conveyor.pb.h"

namespace conveyor::client {

namespace v1 = ::conveyor::v1;

// Where one batch's images are.
struct BatchBytes {
  // Host-readable bytes; nullptr for the bytes of a DEVICE_MEMORY batch on a
  // real GPU (then only `device` says where they are).
  const uint8_t* host = nullptr;
  // DEVICE_MEMORY: the device address (CUdeviceptr) of the first byte; 0
  // for host transports. Under the daemon's host model it is the mapped
  // address, equal to `host`.
  uint64_t device = 0;
  // INLINE: the bytes `host` points into (moved out of the message).
  std::unique_ptr<std::string> owned;
};

// What a transport needs besides StreamOpened.
struct TransportOptions {
  std::optional<std::string> data_host;  // the TCP host; nullopt on a unix socket
  absl::Duration side_timeout = absl::Seconds(10);
  absl::Duration data_read_timeout = absl::Seconds(120);
  bool pin_memory = false;  // SHARED_MEMORY: page-lock the region for CUDA
  std::string gpu_uuid;     // the GPU of DEVICE_MEMORY and of pin_memory ("" = device 0)
  // Loads the CUDA driver when a stream needs it (pin_memory, a device
  // region): CudaDriver::Default unless a test gives another.
  std::function<absl::StatusOr<std::shared_ptr<const CudaDriver>>()> driver = CudaDriver::Default;
};

class ClientTransport {
 public:
  virtual ~ClientTransport() = default;

  // The transport this object serves.
  virtual v1::Transport kind() const = 0;

  // Where the images of `batch` are; `bytes` is what its shape and dtype
  // make (checked by the caller). May move the bytes out of `batch`
  // (INLINE), leaving images empty and images_bytes set. INTERNAL
  // "protocol error: ..." when the batch does not fit the transport;
  // UNAVAILABLE when the bytes cannot be read.
  virtual absl::StatusOr<BatchBytes> View(v1::Batch& batch, uint64_t bytes) = 0;

  // Copies `length` bytes of `view` (one of this transport's) into `out`:
  // a memcpy for host bytes, a device-to-host copy for device bytes.
  virtual absl::Status CopyToHost(const BatchBytes& view, uint64_t length, uint8_t* out) const;
};

inline absl::Status ProtocolError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("protocol error: ", what));
}

// OK when the batch's images_bytes is `bytes` (what its shape and dtype make).
absl::Status CheckImagesBytes(const v1::Batch& batch, uint64_t bytes);

}  // namespace conveyor::client
