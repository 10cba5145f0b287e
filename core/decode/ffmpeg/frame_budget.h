// AvFrameBudget: the memory bound of a video decoder's frames. Installed on
// an AVCodecContext (Install), it becomes the context's get_buffer2: every
// frame buffer the codec asks for is sized from the codec's own frame
// geometry (the width, height and pixel format it decodes, which a hostile
// bitstream may set far above the container's), and refused with
// AVERROR(ENOMEM) before anything is allocated when
//   - the frame with the codec's reference frames (AVCodecContext.refs, the
//     H.264 SPS's count; at least 1) and the one being decoded would need
//     more than the limit: (refs + 1) × frame bytes, or
//   - the frame buffers alive now plus this one would pass the limit.
// Otherwise FFmpeg's avcodec_default_get_buffer2 allocates it and the bytes it
// really allocated are counted until the codec and every frame let go of them
// (each buffer is wrapped in one whose release subtracts its size).
//
// After a refusal the decoder's call fails (or, with a codec that conceals
// errors, decodes nothing): refused() and Refusal() say why, to be reported
// instead of FFmpeg's ENOMEM.
//
// Codecs that allocate through their own library (libdav1d) do not call
// get_buffer2; AVCodecContext.max_pixels (set by the caller) bounds those.
//
// Thread-safety: not thread-safe; one per decoder, used on one thread (the
// codecs run with thread_count 1, so buffers are taken and released on the
// decoding thread). It must outlive the codec context and every frame the
// context produced (declare it before them).
#pragma once

#include <cstdint>

#include "absl/status/status.h"

extern "C" {
#include <libavcodec/avcodec.h>
}

namespace conveyor {

class AvFrameBudget {
 public:
  AvFrameBudget() = default;
  AvFrameBudget(const AvFrameBudget&) = delete;
  AvFrameBudget& operator=(const AvFrameBudget&) = delete;

  // Starts a sample: `limit_bytes` from now, nothing refused. Buffers still
  // counted from an earlier sample stay counted.
  void Reset(uint64_t limit_bytes);

  // Makes `ctx` take its frame buffers through this budget.
  // REQUIRES: ctx not opened yet.
  void Install(AVCodecContext* ctx);

  // Lowers the frames' share for the rest of the sample: the decoder's
  // other buffers, once known, come out of the same bound (a refusal then
  // counts them in what it needs). REQUIRES: limit_bytes <= Reset's.
  void SetLimit(uint64_t limit_bytes) { limit_ = limit_bytes; }
  uint64_t limit() const { return limit_; }

  bool refused() const { return refused_; }
  // ResourceExhausted naming the codec's frame size, its reference frames
  // and the limit. REQUIRES: refused().
  absl::Status Refusal() const;

  uint64_t live_bytes() const { return live_; }  // counted and not yet released
  uint64_t peak_bytes() const { return peak_; }  // most live at once since Reset

 private:
  struct Held;
  static int GetBuffer(AVCodecContext* ctx, AVFrame* frame, int flags);
  static void Release(void* opaque, uint8_t* data);
  int Take(AVCodecContext* ctx, AVFrame* frame, int flags);

  uint64_t max_ = 0;    // the sample's bound (Reset)
  uint64_t limit_ = 0;  // what of it the frames may use (SetLimit)
  uint64_t live_ = 0;
  uint64_t peak_ = 0;
  bool refused_ = false;
  // The refused request.
  int width_ = 0, height_ = 0, refs_ = 0;
  uint64_t frame_bytes_ = 0, need_ = 0;
  const char* format_ = "";
};

}  // namespace conveyor
