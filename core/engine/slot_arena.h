// SlotArena: a fixed number of equal-size batch slots in one memory region.
//
// The region is a memfd (sealed against growing and shrinking) when its
// memory kind is shared (IsShared: a client process maps it, or the device's
// DMA reads it), or anonymous private memory otherwise. The arena keeps its
// kind (memory()); page-locking a kPinnedMemfd / kDevice arena is the
// transport's (core/engine/slot_memory.h).
// The arena owns the fd and the mapping (RAII); a client that maps the fd
// keeps its own mapping, and the kernel frees the memory when the last
// mapping and fd are gone, so a crashed client leaks nothing.
//
// Thread-safety: the arena itself is immutable after Create(); distinct slots
// may be written by distinct threads concurrently. Who may write which slot
// is decided by the owner (the Stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"
#include "core/engine/slot_memory.h"

namespace conveyor {

class SlotArena {
 public:
  // REQUIRES: num_slots > 0, slot_bytes > 0. slot_bytes is rounded up to the
  // page size. A shared `memory` kind (IsShared) gets a memfd (fd() valid),
  // kPrivate private memory.
  static absl::StatusOr<std::unique_ptr<SlotArena>> Create(size_t num_slots, size_t slot_bytes,
                                                           SlotMemory memory,
                                                           const std::string& name);
  // Bytes Create(num_slots, slot_bytes, ...) maps: slots rounded up to whole
  // pages. For budgeting before creating.
  static uint64_t MappedBytes(size_t num_slots, size_t slot_bytes);

  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  size_t num_slots() const { return num_slots_; }
  size_t slot_bytes() const { return slot_bytes_; }
  size_t total_bytes() const { return num_slots_ * slot_bytes_; }
  uint8_t* slot(size_t i) const { return base_ + i * slot_bytes_; }
  // Byte offset of slot i from the start of the region (what a client maps).
  size_t slot_offset(size_t i) const { return i * slot_bytes_; }
  // The memfd, or -1 when the arena's memory is kPrivate. Still owned by the arena.
  int fd() const { return fd_.get(); }
  SlotMemory memory() const { return memory_; }

 private:
  SlotArena(size_t num_slots, size_t slot_bytes, SlotMemory memory, UniqueFd fd, uint8_t* base)
      : num_slots_(num_slots),
        slot_bytes_(slot_bytes),
        memory_(memory),
        fd_(std::move(fd)),
        base_(base) {}

  const size_t num_slots_;
  const size_t slot_bytes_;
  const SlotMemory memory_;
  UniqueFd fd_;
  uint8_t* const base_;
};

}  // namespace conveyor
