#include "core/decode/ffmpeg/error.h"

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"

extern "C" {
#include <libavutil/error.h>
}

namespace conveyor {

std::string AvErrorText(int averror) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(averror, text, sizeof text) < 0) {
    return absl::StrCat("FFmpeg error ", averror);
  }
  return text;
}

absl::Status AvError(int averror, absl::string_view what) {
  if (averror == AVERROR(ENOMEM)) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": out of memory"));
  }
  if (averror == AVERROR_EXIT) {
    return absl::DeadlineExceededError(absl::StrCat(what, ": stopped (time budget)"));
  }
  switch (averror) {
    case AVERROR_INVALIDDATA:
    case AVERROR_EOF:
    case AVERROR_DECODER_NOT_FOUND:
    case AVERROR_DEMUXER_NOT_FOUND:
    case AVERROR_STREAM_NOT_FOUND:
    case AVERROR_PATCHWELCOME:
    case AVERROR_BUG:
    case AVERROR_BUG2:
    case AVERROR_UNKNOWN:
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", AvErrorText(averror)));
    default: break;
  }
  // AVERROR(e) is -e for POSIX errnos (FFmpeg's convention on Linux).
  const int errno_value = -averror;
  if (errno_value > 0 && errno_value < 4096) return PosixError(what, errno_value);
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", AvErrorText(averror)));
}

}  // namespace conveyor
