// MappedRegion: the client's mapping of one SHARED_MEMORY stream's slot
// region (the memfd handed over by the daemon), mapped once, MAP_SHARED.
// It owns the mapping and unmaps it on destruction; the fd may be closed
// after Map() (the mapping keeps the memory alive, and the kernel frees it
// when the daemon's and every client's mapping are gone, so a crashed
// client leaks nothing).
//
// The mapping is read-only: batches are the daemon's slots, and the client
// never writes them.
//
// Thread-safety: a value with one owner; Bytes() of a const region may be
// read from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace conveyor::client {

class MappedRegion {
 public:
  MappedRegion() = default;
  ~MappedRegion();
  MappedRegion(MappedRegion&& other) noexcept;
  MappedRegion& operator=(MappedRegion&& other) noexcept;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  // Maps the first `size` bytes of `fd` (not owned). FailedPrecondition when
  // the file is smaller than `size` (the daemon announced more than it
  // sent) or `size` is 0.
  static absl::StatusOr<MappedRegion> Map(int fd, uint64_t size);

  // The bytes [offset, offset + length) of the region; OutOfRange when they
  // do not lie inside it.
  absl::StatusOr<const uint8_t*> Bytes(uint64_t offset, uint64_t length) const;

  uint64_t size() const { return size_; }
  // The first byte of the mapping; nullptr when not mapped.
  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  bool mapped() const { return data_ != nullptr; }

 private:
  MappedRegion(void* data, uint64_t size) : data_(data), size_(size) {}
  void Reset();

  void* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace conveyor::client
