#include "core/engine/slot_memory.h"

namespace conveyor {

const char* SlotMemoryName(SlotMemory memory) {
  switch (memory) {
    case SlotMemory::kPrivate: return "private";
    case SlotMemory::kMemfd: return "memfd";
    case SlotMemory::kPinnedMemfd: return "pinned_memfd";
    case SlotMemory::kDevice: return "device";
  }
  return "?";
}

bool IsShared(SlotMemory memory) { return memory != SlotMemory::kPrivate; }

}  // namespace conveyor
