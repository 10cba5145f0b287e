// DecoderVersions: the versions of the libraries that turn a sample's bytes
// into pixels and audio (libjpeg-turbo, FFmpeg's codecs, scaler and
// resampler). Two builds with equal versions decode equal bytes to equal
// samples; a pipeline's fingerprint includes them (core/engine/pipeline_fingerprint.h).
//
// Thread-safety: a pure function of the linked libraries; safe from any thread.
#pragma once

#include <string>

namespace conveyor {

// "libjpeg-turbo=2001005;libavcodec=3876708;..." : libjpeg-turbo's version
// as built against (it has no run-time query), FFmpeg's as linked at run
// time (LIBAVCODEC_VERSION_INT form).
std::string DecoderVersions();

}  // namespace conveyor
