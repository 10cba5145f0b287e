#include "core/base/posix_error.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace conveyor {

namespace {
// The payload URL of the system mark (a status payload, so the mark travels
// with the status through copies and StatusOr).
constexpr char kSystemErrorUrl[] = "type.conveyor.dev/system-error";
}  // namespace

bool IsSystemErrno(int e) {
  switch (e) {
    case EMFILE:  // the process is out of file descriptors
    case ENFILE:  // the machine is
    case ENOMEM:
    case ENOBUFS:
    case EIO:  // the device failed, not the file's content
    case EAGAIN:
    case EINTR:
    case EBUSY:
    case ETIMEDOUT:
    case ESTALE:  // NFS handle went stale
    case ENOLCK:
    case ENOLINK:
    case ECOMM:
    case ENETDOWN:
    case ENETUNREACH:
    case ENETRESET:
    case ECONNRESET:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case EHOSTDOWN: return true;
    default: return false;
  }
}

absl::Status PosixError(absl::string_view what, int error_number) {
  const char* symbol = strerrorname_np(error_number);
  const std::string name = symbol != nullptr ? symbol : std::to_string(error_number);
  // absl::ErrnoToStatus's code, with the symbol in the message as well.
  absl::Status st(absl::ErrnoToStatusCode(error_number),
                  absl::StrCat(what, ": ", std::strerror(error_number), " (", name, ")"));
  return IsSystemErrno(error_number) ? MarkSystemError(std::move(st)) : st;
}

absl::Status MarkSystemError(absl::Status status) {
  if (!status.ok()) status.SetPayload(kSystemErrorUrl, absl::Cord("1"));
  return status;
}

bool IsSystemError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kSystemErrorUrl).has_value();
}

}  // namespace conveyor
