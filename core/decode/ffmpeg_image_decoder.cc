#include "core/decode/ffmpeg_image_decoder.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/thread_cpu_clock.h"
#include "core/decode/ffmpeg/error.h"

extern "C" {
#include <libavutil/log.h>
#include <libavutil/pixdesc.h>
}

namespace conveyor {
namespace {

// Rows converted and handed to the sink at a time.
constexpr int kBatchRows = 16;
// Fixed part of the working memory (codec context, tables, zlib state).
constexpr uint64_t kFixedDecodeBytes = 256 * 1024;

struct FormatCodec {
  const char* format;
  AVCodecID id;
};
constexpr FormatCodec kCodecs[5] = {{"PNG", AV_CODEC_ID_PNG},
                                    {"GIF", AV_CODEC_ID_GIF},
                                    {"WebP", AV_CODEC_ID_WEBP},
                                    {"BMP", AV_CODEC_ID_BMP},
                                    {"TIFF", AV_CODEC_ID_TIFF}};

int CodecIndex(const char* format) {
  for (int i = 0; i < 5; ++i) {
    if (std::strcmp(kCodecs[i].format, format) == 0) return i;
  }
  return -1;
}

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// FFmpeg logs to stderr by default; the decoders report through Status
// instead (a hostile dataset must not flood the daemon's log).
void QuietFfmpegLog() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

// Pixel formats converted here directly (exactly as Pillow converts them);
// the rest go through libswscale.
enum class Packing {
  kRgb,
  kBgr,
  kRgbx,
  kBgrx,
  kXrgb,
  kXbgr,
  kGray,
  kGrayAlpha,
  kPal,
  kMonoBlack,
  kMonoWhite,
  kRgb16,
  kRgba16,
  kGray16,
  kGrayAlpha16,
  kYuv420,
  kOther
};

struct PixelLayout {
  Packing packing = Packing::kOther;
  int high_byte = 0;  // 16-bit formats: offset of the high byte in a sample (0 BE, 1 LE)
};

PixelLayout LayoutOf(AVPixelFormat f) {
  switch (f) {
    case AV_PIX_FMT_RGB24: return {Packing::kRgb};
    case AV_PIX_FMT_BGR24: return {Packing::kBgr};
    case AV_PIX_FMT_RGBA:
    case AV_PIX_FMT_RGB0: return {Packing::kRgbx};
    case AV_PIX_FMT_BGRA:
    case AV_PIX_FMT_BGR0: return {Packing::kBgrx};
    case AV_PIX_FMT_ARGB:
    case AV_PIX_FMT_0RGB: return {Packing::kXrgb};
    case AV_PIX_FMT_ABGR:
    case AV_PIX_FMT_0BGR: return {Packing::kXbgr};
    case AV_PIX_FMT_GRAY8: return {Packing::kGray};
    case AV_PIX_FMT_YA8: return {Packing::kGrayAlpha};
    case AV_PIX_FMT_PAL8: return {Packing::kPal};
    case AV_PIX_FMT_MONOBLACK: return {Packing::kMonoBlack};
    case AV_PIX_FMT_MONOWHITE: return {Packing::kMonoWhite};
    case AV_PIX_FMT_RGB48BE: return {Packing::kRgb16, 0};
    case AV_PIX_FMT_RGB48LE: return {Packing::kRgb16, 1};
    case AV_PIX_FMT_RGBA64BE: return {Packing::kRgba16, 0};
    case AV_PIX_FMT_RGBA64LE: return {Packing::kRgba16, 1};
    case AV_PIX_FMT_GRAY16BE: return {Packing::kGray16, 0};
    case AV_PIX_FMT_GRAY16LE: return {Packing::kGray16, 1};
    case AV_PIX_FMT_YA16BE: return {Packing::kGrayAlpha16, 0};
    case AV_PIX_FMT_YA16LE: return {Packing::kGrayAlpha16, 1};
    case AV_PIX_FMT_YUV420P:
    case AV_PIX_FMT_YUVA420P: return {Packing::kYuv420};
    default: return {};
  }
}

// Converts pixels [x0, x0 + n) of one row to packed RGB.
void ConvertRow(const PixelLayout& layout, const uint8_t* row, const uint32_t* palette, int x0,
                int n, uint8_t* out) {
  const int hb = layout.high_byte;
  switch (layout.packing) {
    case Packing::kRgb: std::memcpy(out, row + 3 * x0, 3 * static_cast<size_t>(n)); return;
    case Packing::kBgr:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 3 * (x0 + i);
        out[3 * i] = s[2], out[3 * i + 1] = s[1], out[3 * i + 2] = s[0];
      }
      return;
    case Packing::kRgbx:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 4 * (x0 + i);
        out[3 * i] = s[0], out[3 * i + 1] = s[1], out[3 * i + 2] = s[2];
      }
      return;
    case Packing::kBgrx:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 4 * (x0 + i);
        out[3 * i] = s[2], out[3 * i + 1] = s[1], out[3 * i + 2] = s[0];
      }
      return;
    case Packing::kXrgb:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 4 * (x0 + i);
        out[3 * i] = s[1], out[3 * i + 1] = s[2], out[3 * i + 2] = s[3];
      }
      return;
    case Packing::kXbgr:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 4 * (x0 + i);
        out[3 * i] = s[3], out[3 * i + 1] = s[2], out[3 * i + 2] = s[1];
      }
      return;
    case Packing::kGray:
      for (int i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = row[x0 + i];
      return;
    case Packing::kGrayAlpha:
      for (int i = 0; i < n; ++i) {
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = row[2 * (x0 + i)];
      }
      return;
    case Packing::kPal:
      for (int i = 0; i < n; ++i) {
        const uint32_t c = palette[row[x0 + i]];  // native-endian ARGB
        out[3 * i] = static_cast<uint8_t>(c >> 16);
        out[3 * i + 1] = static_cast<uint8_t>(c >> 8);
        out[3 * i + 2] = static_cast<uint8_t>(c);
      }
      return;
    case Packing::kMonoBlack:
    case Packing::kMonoWhite: {
      const uint8_t one = layout.packing == Packing::kMonoBlack ? 255 : 0;
      for (int i = 0; i < n; ++i) {
        const int x = x0 + i;
        const bool bit = (row[x >> 3] >> (7 - (x & 7))) & 1;
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = bit ? one : static_cast<uint8_t>(255 - one);
      }
      return;
    }
    case Packing::kRgb16:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 6 * (x0 + i) + hb;
        out[3 * i] = s[0], out[3 * i + 1] = s[2], out[3 * i + 2] = s[4];
      }
      return;
    case Packing::kRgba16:
      for (int i = 0; i < n; ++i) {
        const uint8_t* s = row + 8 * (x0 + i) + hb;
        out[3 * i] = s[0], out[3 * i + 1] = s[2], out[3 * i + 2] = s[4];
      }
      return;
    case Packing::kGray16:
      for (int i = 0; i < n; ++i) {
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = row[2 * (x0 + i) + hb];
      }
      return;
    case Packing::kGrayAlpha16:
      for (int i = 0; i < n; ++i) {
        out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = row[4 * (x0 + i) + hb];
      }
      return;
    case Packing::kYuv420:  // converted by ConvertYuv420Row
    case Packing::kOther: return;
  }
}

// libwebp's YUV -> RGB (VP8YUVToR/G/B: BT.601 studio range in 14-bit fixed
// point), which Pillow's WebP decode uses.
inline int MultHi(int v, int coeff) { return (v * coeff) >> 8; }
inline uint8_t Clip8Yuv(int v) {
  constexpr int kMask = (256 << 6) - 1;
  return (v & ~kMask) == 0 ? static_cast<uint8_t>(v >> 6) : (v < 0 ? 0 : 255);
}

// Row y of a YUV 4:2:0 frame (lossy WebP), pixels [x0, x0 + n), as libwebp
// converts it with its default "fancy" upsampling: each pixel's chroma is
// (9 * nearest + 3 * the two next + farthest + 8) / 16 of the four chroma
// samples around it (edges replicated), then libwebp's fixed-point matrix.
// VP8 decoding is bit-exact, so this equals Pillow's pixels.
void ConvertYuv420Row(const AVFrame& f, int y, int x0, int n, uint8_t* out) {
  const int cw = (f.width + 1) / 2, ch = (f.height + 1) / 2;
  const int near_row = y >> 1;
  const int far_row = std::clamp((y & 1) ? near_row + 1 : near_row - 1, 0, ch - 1);
  const uint8_t* yr = f.data[0] + static_cast<ptrdiff_t>(y) * f.linesize[0];
  const uint8_t* un = f.data[1] + static_cast<ptrdiff_t>(near_row) * f.linesize[1];
  const uint8_t* uf = f.data[1] + static_cast<ptrdiff_t>(far_row) * f.linesize[1];
  const uint8_t* vn = f.data[2] + static_cast<ptrdiff_t>(near_row) * f.linesize[2];
  const uint8_t* vf = f.data[2] + static_cast<ptrdiff_t>(far_row) * f.linesize[2];
  for (int i = 0; i < n; ++i) {
    const int x = x0 + i;
    const int nc = x >> 1;
    const int fc = std::clamp((x & 1) ? nc + 1 : nc - 1, 0, cw - 1);
    const int u = (9 * un[nc] + 3 * un[fc] + 3 * uf[nc] + uf[fc] + 8) >> 4;
    const int v = (9 * vn[nc] + 3 * vn[fc] + 3 * vf[nc] + vf[fc] + 8) >> 4;
    const int yy = MultHi(yr[x], 19077);
    out[3 * i] = Clip8Yuv(yy + MultHi(v, 26149) - 14234);
    out[3 * i + 1] = Clip8Yuv(yy - MultHi(u, 6419) - MultHi(v, 13320) + 8708);
    out[3 * i + 2] = Clip8Yuv(yy + MultHi(u, 33050) - 17685);
  }
}

}  // namespace

struct FfmpegImageDecoder::Codec {
  AvCodecContextPtr context;
};

FfmpegImageDecoder::FfmpegImageDecoder() : frame_(av_frame_alloc()), packet_(av_packet_alloc()) {
  QuietFfmpegLog();
}

FfmpegImageDecoder::~FfmpegImageDecoder() = default;

uint64_t FfmpegImageDecoder::EstimateDecodeMemory(const ImageProbe& probe) {
  const uint64_t pixels = static_cast<uint64_t>(probe.width) * static_cast<uint64_t>(probe.height);
  return kFixedDecodeBytes + pixels * static_cast<uint64_t>(probe.frame_bytes_per_pixel) +
         static_cast<uint64_t>(probe.width) * 3 * kBatchRows + kRowSlack;
}

absl::StatusOr<ImageProbe> FfmpegImageDecoder::ReadHeader(std::span<const uint8_t> bytes,
                                                          const char* format,
                                                          const DecodeLimits& limits) {
  codec_ = nullptr;
  limits_ = limits;
  cpu_deadline_ns_ = limits.max_cpu_seconds > 0
                         ? ThreadCpuNs() + static_cast<int64_t>(limits.max_cpu_seconds * 1e9)
                         : 0;
  const int index = CodecIndex(format);
  if (index < 0) return absl::InvalidArgumentError(absl::StrCat("no FFmpeg decoder for ", format));
  absl::StatusOr<ImageProbe> probe = ProbeImage(bytes, format);
  if (!probe.ok()) return probe.status();
  const uint64_t pixels =
      static_cast<uint64_t>(probe->width) * static_cast<uint64_t>(probe->height);
  if (pixels > limits.max_pixels) {
    return absl::InvalidArgumentError(absl::StrFormat("%s image %dx%d exceeds max_pixels %d",
                                                      format, probe->width, probe->height,
                                                      limits.max_pixels));
  }
  if (limits.max_memory != 0) {
    const uint64_t need = EstimateDecodeMemory(*probe);
    if (need > limits.max_memory) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s image %dx%d needs about %.1f MiB to decode, more than max_decode_memory (%.1f MiB)",
          format, probe->width, probe->height, Mib(need), Mib(limits.max_memory)));
    }
  }
  if (index == 0) {
    if (absl::Status s = CheckPngInflate(bytes, *probe, cpu_deadline_ns_, limits.max_cpu_seconds);
        !s.ok()) {
      return s;
    }
  }
  if (codecs_[index] == nullptr) codecs_[index] = std::make_unique<Codec>();
  codec_ = codecs_[index].get();
  bytes_ = bytes;
  probe_ = *probe;
  return probe_;
}

absl::Status FfmpegImageDecoder::CheckTime(const char* where) const {
  if (cpu_deadline_ns_ != 0 && ThreadCpuNs() > cpu_deadline_ns_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("decoding took more than max_decode_seconds (%g s of CPU; %s %s)",
                        limits_.max_cpu_seconds, probe_.format, where));
  }
  return absl::OkStatus();
}

absl::Status FfmpegImageDecoder::Decode() {
  if (frame_ == nullptr || packet_ == nullptr) return AvError(AVERROR(ENOMEM), "FFmpeg frame");
  const int index = CodecIndex(probe_.format);
  const std::string what = absl::StrCat("corrupt or truncated ", probe_.format, " data");
  if (codec_->context == nullptr) {
    const AVCodec* codec = avcodec_find_decoder(kCodecs[index].id);
    if (codec == nullptr) {
      return absl::InternalError(absl::StrCat("this FFmpeg has no ", probe_.format, " decoder"));
    }
    AvCodecContextPtr context(avcodec_alloc_context3(codec));
    if (context == nullptr) return AvError(AVERROR(ENOMEM), "FFmpeg codec context");
    context->thread_count = 1;  // one decode per worker thread
    context->thread_type = 0;
    // A bad PNG CRC is an error, as in Pillow. (AV_EF_EXPLODE would also
    // refuse TIFFs with tags FFmpeg does not know, e.g. ExtraSamples.)
    context->err_recognition =
        kCodecs[index].id == AV_CODEC_ID_PNG ? AV_EF_CRCCHECK | AV_EF_EXPLODE : AV_EF_CRCCHECK;
    if (int rc = avcodec_open2(context.get(), codec, nullptr); rc < 0) {
      return AvError(rc, absl::StrCat("opening FFmpeg's ", probe_.format, " decoder"));
    }
    codec_->context = std::move(context);
  }
  AVCodecContext* ctx = codec_->context.get();
  ctx->max_pixels = static_cast<int64_t>(limits_.max_pixels);  // backstop of the probe's check
  avcodec_flush_buffers(ctx);
  av_frame_unref(frame_.get());

  // The packet: the file's bytes and FFmpeg's zeroed input padding, in a
  // buffer kept between images (its only reference is ours between calls).
  const size_t need = bytes_.size() + AV_INPUT_BUFFER_PADDING_SIZE;
  if (packet_buffer_ == nullptr || static_cast<size_t>(packet_buffer_->size) < need ||
      !av_buffer_is_writable(packet_buffer_.get())) {
    AVBufferRef* raw = packet_buffer_.release();
    if (raw != nullptr && !av_buffer_is_writable(raw)) av_buffer_unref(&raw);
    if (int rc = av_buffer_realloc(&raw, need); rc < 0) return AvError(rc, "packet buffer");
    packet_buffer_.reset(raw);
  }
  std::memcpy(packet_buffer_->data, bytes_.data(), bytes_.size());
  std::memset(packet_buffer_->data + bytes_.size(), 0, AV_INPUT_BUFFER_PADDING_SIZE);
  av_packet_unref(packet_.get());
  packet_->buf = av_buffer_ref(packet_buffer_.get());
  if (packet_->buf == nullptr) return AvError(AVERROR(ENOMEM), "packet buffer");
  packet_->data = packet_buffer_->data;
  packet_->size = static_cast<int>(bytes_.size());
  packet_->flags = AV_PKT_FLAG_KEY;

  int rc = avcodec_send_packet(ctx, packet_.get());
  av_packet_unref(packet_.get());
  if (rc >= 0) {
    rc = avcodec_receive_frame(ctx, frame_.get());
    if (rc == AVERROR(EAGAIN)) {  // a decoder that holds the frame until drained
      rc = avcodec_send_packet(ctx, nullptr);
      if (rc >= 0) rc = avcodec_receive_frame(ctx, frame_.get());
    }
  }
  if (rc < 0) {
    codec_->context.reset();  // no state of a bad image reaches the next one
    const absl::Status s = AvError(rc == AVERROR(EAGAIN) ? AVERROR_INVALIDDATA : rc, what);
    // Data errors are the sample's: DataLoss like a corrupt JPEG.
    if (absl::IsInvalidArgument(s)) return absl::DataLossError(s.message());
    return s;
  }
  if (absl::Status s = CheckTime("decode"); !s.ok()) return s;
  if (frame_->width != probe_.width || frame_->height != probe_.height) {
    return absl::DataLossError(absl::StrFormat("%s: decoded %dx%d, the header says %dx%d", what,
                                               frame_->width, frame_->height, probe_.width,
                                               probe_.height));
  }
  return absl::OkStatus();
}

absl::Status FfmpegImageDecoder::DecodeRegion(const PixelRegion& region, RowSink sink) {
  if (codec_ == nullptr) return absl::FailedPreconditionError("DecodeRegion without ReadHeader");
  absl::Status s = Decode();
  codec_ = nullptr;  // one DecodeRegion per ReadHeader
  if (!s.ok()) return s;
  return ConvertRows(region, sink);
}

absl::Status FfmpegImageDecoder::ConvertRows(const PixelRegion& region, RowSink sink) {
  const int w = frame_->width, h = frame_->height;
  if (region.x0 < 0 || region.x1 > w || region.x0 >= region.x1 || region.y0 < 0 || region.y1 > h ||
      region.y0 >= region.y1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region [%d,%d)x[%d,%d) outside the %dx%d image", region.x0, region.x1,
                        region.y0, region.y1, w, h));
  }
  PixelLayout layout = LayoutOf(static_cast<AVPixelFormat>(frame_->format));
  const uint8_t* base = frame_->data[0];
  ptrdiff_t linesize = frame_->linesize[0];
  if (layout.packing == Packing::kOther) {
    // libswscale converts the whole frame to RGB24 (15/16-bit RGB, planar
    // and other rare formats); rows are then copied out.
    const size_t stride = static_cast<size_t>(w) * 3;
    const size_t size = stride * h;
    if (rgb_capacity_ < size) {
      rgb_.reset(new uint8_t[size]);
      rgb_capacity_ = size;
    }
    sws_.reset(sws_getCachedContext(
        sws_.release(), w, h, static_cast<AVPixelFormat>(frame_->format), w, h, AV_PIX_FMT_RGB24,
        SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr));
    if (sws_ == nullptr) {
      return absl::DataLossError(absl::StrCat(
          probe_.format, " image: no conversion from pixel format ",
          av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame_->format)) ?: "unknown", " to RGB"));
    }
    uint8_t* dst[4] = {rgb_.get(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {static_cast<int>(stride), 0, 0, 0};
    sws_scale(sws_.get(), frame_->data, frame_->linesize, 0, h, dst, dst_stride);
    if (absl::Status s = CheckTime("conversion"); !s.ok()) return s;
    layout = {Packing::kRgb};
    base = rgb_.get();
    linesize = static_cast<ptrdiff_t>(stride);
  }
  const auto* palette = reinterpret_cast<const uint32_t*>(frame_->data[1]);
  if (layout.packing == Packing::kPal && palette == nullptr) {
    return absl::DataLossError(absl::StrCat(probe_.format, " image: palette missing"));
  }
  const int n = region.x1 - region.x0;
  const size_t row_bytes = static_cast<size_t>(n) * 3;
  const size_t need = row_bytes * kBatchRows + kRowSlack;
  if (batch_capacity_ < need) {
    batch_.reset(new uint8_t[need]());
    batch_capacity_ = need;
  }
  for (int y = region.y0; y < region.y1; y += kBatchRows) {
    const int count = std::min(kBatchRows, region.y1 - y);
    for (int i = 0; i < count; ++i) {
      uint8_t* out = batch_.get() + i * row_bytes;
      if (layout.packing == Packing::kYuv420) {
        ConvertYuv420Row(*frame_, y + i, region.x0, n, out);
      } else {
        ConvertRow(layout, base + (y + i) * linesize, palette, region.x0, n, out);
      }
    }
    sink(batch_.get(), row_bytes, count);
    if (absl::Status s = CheckTime("conversion"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace conveyor
