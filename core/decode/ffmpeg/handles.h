// RAII owners for FFmpeg (libav*) handles: every AVFormatContext,
// AVCodecContext, AVFrame, AVPacket, AVBufferRef, SwsContext and SwrContext the decoders
// use is held by one of these, so no error path leaks one.
//
// Thread-safety: an owner is a unique_ptr; FFmpeg handles are not safe for
// concurrent use, so each belongs to one worker thread at a time.
#pragma once

#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/frame.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

namespace conveyor {

struct AvFormatInputCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct AvCodecContextFreer {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct AvFrameFreer {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct AvPacketFreer {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsContextFreer {
  void operator()(SwsContext* c) const { sws_freeContext(c); }
};
struct SwrContextFreer {
  void operator()(SwrContext* c) const { swr_free(&c); }
};
struct AvBufferUnref {
  void operator()(AVBufferRef* b) const { av_buffer_unref(&b); }
};

// An input opened with avformat_open_input (closed with avformat_close_input).
using AvFormatInput = std::unique_ptr<AVFormatContext, AvFormatInputCloser>;
using AvCodecContextPtr = std::unique_ptr<AVCodecContext, AvCodecContextFreer>;
using AvFramePtr = std::unique_ptr<AVFrame, AvFrameFreer>;
using AvPacketPtr = std::unique_ptr<AVPacket, AvPacketFreer>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextFreer>;
using SwrContextPtr = std::unique_ptr<SwrContext, SwrContextFreer>;
// A reference to a refcounted FFmpeg buffer (av_buffer_unref on release).
using AvBufferPtr = std::unique_ptr<AVBufferRef, AvBufferUnref>;

}  // namespace conveyor
