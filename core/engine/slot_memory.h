// SlotMemory: what kind of memory a stream's batch slots live in, chosen by
// the stream's transport (server/transport/transport.h) and carried by
// StreamOptions into the SlotArena, which keeps it (SlotArena::memory()).
// The kind names who may see the slots and what the daemon does with them;
// the arena itself only distinguishes private memory from a memfd
// (IsShared). Page-locking and the device ring are the transport's (its
// BatchFinisher, core/engine/batch_finisher.h, gets the arena in Attach).
//
// Plain enum and pure functions: thread-safe.
#pragma once

namespace conveyor {

enum class SlotMemory {
  // Anonymous private memory of the daemon: the bytes leave it by copy
  // (inline messages, the data socket).
  kPrivate,
  // A sealed memfd the client maps (SHARED_MEMORY streams).
  kMemfd,
  // A memfd, as kMemfd, that the daemon also page-locks for the device's
  // DMA (so host→device copies from the slots are asynchronous).
  kPinnedMemfd,
  // Host staging slots in a pinned memfd, plus a ring of device buffers
  // owned by the transport that each finished slot is copied into
  // (DEVICE_MEMORY streams).
  kDevice,
};

// "private", "memfd", "pinned_memfd", "device", for logs and errors.
const char* SlotMemoryName(SlotMemory memory);

// Whether the slots must be in a memfd (another process maps it, or the
// device's DMA reads it): every kind but kPrivate.
bool IsShared(SlotMemory memory);

}  // namespace conveyor
