// PosixError: the one place where an errno becomes an absl::Status, for the
// whole tree (core/ and server/). The code is absl::ErrnoToStatusCode's;
// the message is "WHAT: strerror (ENAME)". Errors that belong to the
// machine rather than to the thing being read (out of fds or memory, I/O
// errors, interrupted or busy resources) carry a "system" mark that
// IsSystemError() reads back:
//
//   - errors of a sample (not found, permission, not a regular file, too
//     large, undecodable) are the sample's: skipped or fatal per the
//     pipeline's error_policy, counted and named;
//   - errors of the system are never a sample's fault: the engine retries
//     them with backoff and then fails the stream with UNAVAILABLE (a
//     retryable status), so no batch silently loses a sample to them.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace conveyor {

// Whether `error_number` is a transient error of the machine (EMFILE,
// ENFILE, ENOMEM, ENOBUFS, EIO, EAGAIN, EINTR, EBUSY, ETIMEDOUT, ESTALE,
// ENOLCK, ...) rather than of the file or request at hand.
bool IsSystemErrno(int error_number);

// The status for `error_number` after `what` failed ("open /data/x.jpg").
// System errnos (IsSystemErrno) are marked (IsSystemError).
absl::Status PosixError(absl::string_view what, int error_number);

// Marks `status` as an error of the system (kept code and message).
absl::Status MarkSystemError(absl::Status status);

// Whether `status` was marked as an error of the system.
bool IsSystemError(const absl::Status& status);

}  // namespace conveyor
