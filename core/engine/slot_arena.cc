#include "core/engine/slot_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"

namespace conveyor {

namespace {
size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}
}  // namespace

uint64_t SlotArena::MappedBytes(size_t num_slots, size_t slot_bytes) {
  return static_cast<uint64_t>(PageRounded(slot_bytes)) * num_slots;
}

absl::StatusOr<std::unique_ptr<SlotArena>> SlotArena::Create(size_t num_slots, size_t slot_bytes,
                                                             SlotMemory memory,
                                                             const std::string& name) {
  if (num_slots == 0 || slot_bytes == 0) {
    return absl::InvalidArgumentError("slot arena needs at least one slot of non-zero size");
  }
  slot_bytes = PageRounded(slot_bytes);
  if (num_slots > SIZE_MAX / slot_bytes) {
    return absl::InvalidArgumentError("slot arena size overflows");
  }
  const size_t total = num_slots * slot_bytes;

  UniqueFd fd;
  int flags = MAP_SHARED;
  if (IsShared(memory)) {
    fd.Reset(memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!fd) {
      return PosixError("memfd_create", errno);
    }
    if (ftruncate(fd.get(), static_cast<off_t>(total)) != 0) {
      return PosixError(absl::StrFormat("ftruncate memfd to %d bytes", total), errno);
    }
    // A client must not be able to shrink the region under the daemon (SIGBUS).
    if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return PosixError("sealing memfd", errno);
    }
  } else {
    flags = MAP_PRIVATE | MAP_ANONYMOUS;
  }
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, flags, fd.valid() ? fd.get() : -1, 0);
  if (base == MAP_FAILED) {
    return PosixError(absl::StrFormat("mmap of %d bytes for %s", total, name), errno);
  }
  return std::unique_ptr<SlotArena>(
      new SlotArena(num_slots, slot_bytes, memory, std::move(fd), static_cast<uint8_t*>(base)));
}

SlotArena::~SlotArena() { munmap(base_, total_bytes()); }

}  // namespace conveyor
