#include "core/base/posix_error.h"

#include <cerrno>

#include "absl/status/statusor.h"
#include "catch2/catch.hpp"
#include "core/base/status_macros.h"

namespace conveyor {
namespace {

TEST_CASE("PosixError names the call, the error and its symbol", "[posix_error]") {
  const absl::Status st = PosixError("open /data/a.jpg", ENOENT);
  CHECK(st.code() == absl::StatusCode::kNotFound);
  CHECK(st.message() == "open /data/a.jpg: No such file or directory (ENOENT)");
  CHECK_FALSE(IsSystemError(st));
}

TEST_CASE("Errors of the file are the sample's, errors of the machine are the system's",
          "[posix_error]") {
  for (int e : {ENOENT, EACCES, EPERM, EISDIR, ENOTDIR, ELOOP, ENAMETOOLONG, EFBIG}) {
    INFO("errno " << e);
    CHECK_FALSE(IsSystemError(PosixError("open", e)));
  }
  for (int e : {EMFILE, ENFILE, ENOMEM, EIO, EAGAIN, EINTR, ESTALE}) {
    INFO("errno " << e);
    const absl::Status st = PosixError("open", e);
    CHECK(IsSystemError(st));
    CHECK_FALSE(st.ok());
  }
  CHECK(PosixError("open", EMFILE).code() == absl::StatusCode::kResourceExhausted);
}

TEST_CASE("The system mark survives copies and StatusOr, and never marks OK", "[posix_error]") {
  absl::StatusOr<int> v = PosixError("read", EIO);
  const absl::Status copy = v.status();
  CHECK(IsSystemError(copy));
  CHECK_FALSE(IsSystemError(MarkSystemError(absl::OkStatus())));
  CHECK(IsSystemError(MarkSystemError(absl::DataLossError("short read"))));
}

absl::Status FailsWith(absl::Status st) { return st; }
absl::StatusOr<int> Value(absl::StatusOr<int> v) { return v; }

absl::Status Chain(absl::Status first, absl::StatusOr<int> second, int* out) {
  RETURN_IF_ERROR(FailsWith(first));
  ASSIGN_OR_RETURN(*out, Value(second));
  return absl::OkStatus();
}

TEST_CASE("RETURN_IF_ERROR and ASSIGN_OR_RETURN return the first error", "[posix_error]") {
  int out = 0;
  CHECK(Chain(absl::InternalError("a"), 5, &out).message() == "a");
  CHECK(out == 0);
  CHECK(Chain(absl::OkStatus(), absl::NotFoundError("b"), &out).message() == "b");
  CHECK(Chain(absl::OkStatus(), 7, &out).ok());
  CHECK(out == 7);
}

}  // namespace
}  // namespace conveyor
