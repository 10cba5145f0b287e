#include "core/decode/ffmpeg/frame_budget.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_format.h"

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

namespace conveyor {
namespace {

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

// One counted buffer: the codec's (default) buffer it stands for.
struct AvFrameBudget::Held {
  AvFrameBudget* budget;
  AVBufferRef* inner;
  uint64_t bytes;
};

void AvFrameBudget::Reset(uint64_t limit_bytes) {
  max_ = limit_ = limit_bytes;
  peak_ = live_;
  refused_ = false;
  width_ = height_ = refs_ = 0;
  frame_bytes_ = need_ = 0;
  format_ = "";
}

void AvFrameBudget::Install(AVCodecContext* ctx) {
  ctx->opaque = this;
  ctx->get_buffer2 = &AvFrameBudget::GetBuffer;
}

absl::Status AvFrameBudget::Refusal() const {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "video: the codec's frames are %dx%d (%s, %d reference frame%s): about %.1f MiB to decode, "
      "more than max_decode_memory (%.1f MiB)",
      width_, height_, format_, refs_, refs_ == 1 ? "" : "s", Mib(need_), Mib(max_)));
}

int AvFrameBudget::GetBuffer(AVCodecContext* ctx, AVFrame* frame, int flags) {
  return static_cast<AvFrameBudget*>(ctx->opaque)->Take(ctx, frame, flags);
}

void AvFrameBudget::Release(void* opaque, uint8_t* /*data*/) {
  Held* held = static_cast<Held*>(opaque);
  held->budget->live_ -= held->bytes;
  av_buffer_unref(&held->inner);
  delete held;
}

int AvFrameBudget::Take(AVCodecContext* ctx, AVFrame* frame, int flags) {
  if (ctx->codec_type != AVMEDIA_TYPE_VIDEO) return avcodec_default_get_buffer2(ctx, frame, flags);
  const auto format = static_cast<AVPixelFormat>(frame->format);
  // What the default allocator will take: the frame padded to the codec's
  // alignment (av_image_get_buffer_size fails for hardware formats: then
  // only what is allocated is counted).
  int w = frame->width, h = frame->height;
  int align[AV_NUM_DATA_POINTERS] = {};
  avcodec_align_dimensions2(ctx, &w, &h, align);
  const int estimate = av_image_get_buffer_size(format, w, h, 64);
  if (estimate > 0) {
    const uint64_t bytes = static_cast<uint64_t>(estimate);
    const int refs = std::max(ctx->refs, 1);
    const uint64_t need = bytes * static_cast<uint64_t>(refs + 1);
    if (need > limit_ || live_ + bytes > limit_) {
      refused_ = true;
      width_ = frame->width;
      height_ = frame->height;
      refs_ = refs;
      frame_bytes_ = bytes;
      need_ = std::max(need, live_ + bytes) + (max_ - limit_);
      const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(format);
      format_ = d != nullptr ? d->name : "unknown format";
      return AVERROR(ENOMEM);
    }
  }
  if (const int rc = avcodec_default_get_buffer2(ctx, frame, flags); rc < 0) return rc;
  // Count what was allocated, each buffer until its last reference goes.
  auto count = [&](AVBufferRef** slot) -> int {
    if (*slot == nullptr) return 0;
    Held* held = new (std::nothrow) Held{this, *slot, static_cast<uint64_t>((*slot)->size)};
    if (held == nullptr) return AVERROR(ENOMEM);
    AVBufferRef* outer =
        av_buffer_create((*slot)->data, (*slot)->size, &AvFrameBudget::Release, held, 0);
    if (outer == nullptr) {
      delete held;
      return AVERROR(ENOMEM);
    }
    live_ += held->bytes;
    peak_ = std::max(peak_, live_);
    *slot = outer;
    return 0;
  };
  int rc = 0;
  for (int i = 0; i < AV_NUM_DATA_POINTERS && rc == 0; ++i) rc = count(&frame->buf[i]);
  for (int i = 0; i < frame->nb_extended_buf && rc == 0; ++i) rc = count(&frame->extended_buf[i]);
  if (rc < 0) {
    av_frame_unref(frame);
    return rc;
  }
  return 0;
}

}  // namespace conveyor
