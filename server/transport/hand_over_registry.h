// HandOverRegistry: the streams whose memory the fd hand-over socket
// (server/transport/fd_server.h) hands to their client, for the transports
// that hand an fd over (SHARED_MEMORY: the region's memfd; DEVICE_MEMORY:
// the device ring). Stream id → the stream's secret, a flag set once the
// client fetched the fd (shared with the stream's transport, whose
// MustWaitForClient reads it), the call's wake callback, and the source
// that makes the fd handed over. An entry lives from the stream's Open until
// its stream transport is destroyed (Unregister).
//
// HandOver compares the secret in constant time, and against a dummy for an
// unknown id so that the answer takes as long either way; both refusals are
// the same PermissionDenied "unknown stream or wrong secret", which does not
// say whether the stream exists.
//
// Thread-safety: all methods may be called from any thread. The fd source,
// the wake callback and the destruction of a dropped entry (its source and
// what that holds) all run outside the registry's lock, so they may block
// (a driver's export) or call back into the registry; a source may run
// while its stream is being unregistered, and must keep alive what it needs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/base/unique_fd.h"
#include "server/transport/secret.h"

namespace conveyor::server {

class HandOverRegistry {
 public:
  // Makes the fd handed over to the stream's client (a new one each call).
  using FdSource = std::function<absl::StatusOr<UniqueFd>()>;

  // What the stream's transport keeps of its entry.
  struct Registration {
    Secret secret{};  // the client proves it owns the stream with this
    // Set (release) once the client fetched the fd; never cleared.
    std::shared_ptr<const std::atomic<bool>> handed_over;
  };

  HandOverRegistry() = default;
  HandOverRegistry(const HandOverRegistry&) = delete;
  HandOverRegistry& operator=(const HandOverRegistry&) = delete;

  // Registers stream `stream_id` with a new secret (NewSecret's error when
  // the kernel gives none), replacing any entry of that id. `wake` (may be
  // empty) is called after each hand-over. InvalidArgument for an empty
  // `source`.
  absl::StatusOr<Registration> Register(uint64_t stream_id, FdSource source,
                                        std::function<void()> wake);

  // Whether `stream_id` has an entry.
  bool Contains(uint64_t stream_id) const;

  // The fd hand-over: the source's fd of stream `stream_id` when `secret` is
  // its secret; PermissionDenied otherwise, and the source's error when it
  // fails. Only after the source succeeded is the flag set and the stream's
  // wake called.
  absl::StatusOr<UniqueFd> HandOver(uint64_t stream_id, const Secret& secret);

  // Drops stream `stream_id`'s entry, if any.
  void Unregister(uint64_t stream_id);

 private:
  struct Entry {
    Secret secret{};
    FdSource source;
    std::shared_ptr<std::atomic<bool>> handed_over;
    std::function<void()> wake;
  };

  mutable Mutex mu_;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
