// RouteFfmpegLogs: FFmpeg's own messages ("moov atom not found", "invalid
// residual", ...) go to the daemon's log at debug level, escaped and with
// the "ffmpeg" prefix, instead of being written raw to stderr. The decoders
// report every failure of a sample themselves (naming the file); FFmpeg's
// lines only help to debug a codec. Warnings and errors of FFmpeg stay at
// debug level too: a hostile file must not flood the log.
//
// Thread-safety: call once at start, before any decoder runs; the callback
// it installs is safe to run on every worker thread at once.
#pragma once

namespace conveyor {

void RouteFfmpegLogs();

}  // namespace conveyor
