// AvError: the one place an FFmpeg (libav*) error code becomes a Status.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"

namespace conveyor {

// FFmpeg's text for `averror` (a negative AVERROR code).
std::string AvErrorText(int averror);

// A Status for a failed libav* call: "<what>: <FFmpeg's text>". Errors of the
// data (AVERROR_INVALIDDATA, EOF, unknown codec or format, patches welcome)
// are InvalidArgument — errors of the sample; AVERROR(ENOMEM) is
// ResourceExhausted and other AVERROR(errno) codes go through PosixError
// (core/base/posix_error.h), so system errors keep their IsSystemError mark;
// AVERROR_EXIT (an interrupt callback stopped the call) is DeadlineExceeded.
// REQUIRES: averror < 0.
absl::Status AvError(int averror, absl::string_view what);

}  // namespace conveyor
