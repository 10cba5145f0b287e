#include "client/cpp/mapped_region.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"

namespace conveyor::client {

MappedRegion::~MappedRegion() { Reset(); }

MappedRegion::MappedRegion(MappedRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedRegion& MappedRegion::operator=(MappedRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedRegion::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

absl::StatusOr<MappedRegion> MappedRegion::Map(int fd, uint64_t size) {
  if (size == 0) return absl::FailedPreconditionError("the daemon announced an empty region");
  struct stat st {};
  if (::fstat(fd, &st) != 0) return PosixError("fstat of the stream's memfd", errno);
  if (static_cast<uint64_t>(st.st_size) < size) {
    return absl::FailedPreconditionError(
        absl::StrCat("the memfd holds ", st.st_size, " bytes, the daemon announced ", size));
  }
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return PosixError("mmap of the stream's memfd", errno);
  return MappedRegion(data, size);
}

absl::StatusOr<const uint8_t*> MappedRegion::Bytes(uint64_t offset, uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", offset, ", ", offset + length,
                                              ") lie outside the ", size_, "-byte region"));
  }
  return static_cast<const uint8_t*>(data_) + offset;
}

}  // namespace conveyor::client
