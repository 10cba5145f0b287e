#include "core/decode/video_clip_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/decode/ffmpeg/display_orientation.h"
#include "core/decode/ffmpeg/error.h"
#include "core/decode/ffmpeg/memory_input.h"

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

namespace conveyor {
namespace {

constexpr const char* kWhat = "video";
// Packets listed per file at most (about 46 hours at 25 fps), whatever the
// duration limit: the list costs 9 bytes a packet.
constexpr size_t kMaxPackets = size_t{1} << 22;
// Buffers kept between samples (the eval scratch, the rotated frame) larger
// than this are freed after their sample, and a scaler for frames wider than
// kKeptScalerWidth: a worker does not stay at the high-water mark of one big
// sample.
constexpr size_t kKeptBytes = size_t{16} << 20;
constexpr int kKeptScalerWidth = 4096;

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// One video packet as the demuxer lists it: its presentation time (or
// decoding time when it has none) and whether it starts a keyframe.
struct PacketTime {
  int64_t ts;
  bool key;
};

absl::Status SampleError(const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("video: ", why));
}

// vf_scale's reading of a frame's colour matrix (unknown: BT.601).
const int* YuvCoefficients(AVColorSpace cs) {
  int c = static_cast<int>(cs);
  if (c < 1 || c > 10 || c == 8) c = AVCOL_SPC_BT470BG;
  return sws_getCoefficients(c);
}

// Mirrors each row of a W x H image (3 planes of 1 byte, or packed RGB).
void FlipRows(uint8_t* const planes[3], int width, int height, bool planar) {
  for (int y = 0; y < height; ++y) {
    if (planar) {
      for (int p = 0; p < 3; ++p)
        std::reverse(planes[p] + size_t(y) * width, planes[p] + size_t(y + 1) * width);
    } else {
      uint8_t* row = planes[0] + size_t(y) * width * 3;
      for (int a = 0, b = width - 1; a < b; ++a, --b) {
        std::swap_ranges(row + a * 3, row + a * 3 + 3, row + b * 3);
      }
    }
  }
}

}  // namespace

VideoClipDecoder::VideoClipDecoder()
    : frame_(av_frame_alloc()),
      oriented_(av_frame_alloc()),
      view_(av_frame_alloc()),
      packet_(av_packet_alloc()) {}
VideoClipDecoder::~VideoClipDecoder() = default;

absl::Status VideoClipDecoder::Run(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                   Rng& rng, uint8_t* out) {
  absl::Status st = RunClip(bytes, spec, rng, out);
  trace_.frame_bytes_peak = frame_budget_.peak_bytes();
  trace_.frame_bytes_left = frame_budget_.live_bytes();
  // Per-worker state does not keep the size of one big sample.
  if (scratch_.capacity() > kKeptBytes) std::vector<uint8_t>().swap(scratch_);
  size_t oriented_bytes = 0;
  for (AVBufferRef* b : oriented_->buf) oriented_bytes += b != nullptr ? b->size : 0;
  if (oriented_bytes > kKeptBytes) av_frame_unref(oriented_.get());
  if (sws_key_.src_w > kKeptScalerWidth || sws_key_.dst_w > kKeptScalerWidth) {
    sws_.reset();
    sws_key_ = SwsKey{};
  }
  return st;
}

absl::Status VideoClipDecoder::RunClip(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                       Rng& rng, uint8_t* out) {
  if (frame_ == nullptr || oriented_ == nullptr || view_ == nullptr || packet_ == nullptr) {
    return AvError(AVERROR(ENOMEM), kWhat);
  }
  if (spec.kind != MediaKind::kVideo) return absl::InternalError("video decoder: not a video spec");
  const VideoSpec& v = spec.video;
  trace_ = Trace{};
  AvMemoryInput::Options options;
  options.budget = AvDecodeBudget::StartNow(spec.max_decode_seconds);
  auto over_time = [&] {
    return absl::ResourceExhaustedError(
        absl::StrCat("video: decoding took longer than max_decode_seconds (",
                     spec.max_decode_seconds, " s of CPU)"));
  };
  absl::StatusOr<std::unique_ptr<AvMemoryInput>> opened =
      AvMemoryInput::Open(bytes, kWhat, options);
  if (!opened.ok()) {
    if (absl::IsDeadlineExceeded(opened.status())) return over_time();
    return opened.status();
  }
  std::unique_ptr<AvMemoryInput> input = *std::move(opened);
  AVFormatContext* fmt = input->format();

  const AVCodec* codec = nullptr;
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (si == AVERROR_STREAM_NOT_FOUND) return SampleError("no video stream");
  if (si == AVERROR_DECODER_NOT_FOUND) {
    return SampleError("no decoder for the video stream's codec");
  }
  if (si < 0) return AvError(si, "video: finding the video stream");
  AVStream* stream = fmt->streams[si];
  const AVCodecParameters* par = stream->codecpar;
  // The container's frame size, when it gives one (MP4's MPEG-4 Part 2
  // streams have none before a frame is decoded), refuses a file early; the
  // size that counts is the codec's, from the first decoded frame (a
  // bitstream may say another than its container).
  if (uint64_t(std::max(par->width, 0)) * uint64_t(std::max(par->height, 0)) > spec.max_pixels) {
    return SampleError(absl::StrCat("frame of ", par->width, "x", par->height,
                                    " exceeds max_pixels (", spec.max_pixels, ")"));
  }
  // The displayed frame: geometry and output follow it.
  const DisplayOrientation orientation =
      v.autorotate ? StreamOrientation(stream) : DisplayOrientation{};
  const bool rotate = !orientation.identity();
  trace_.orientation = orientation;
  const double tb = av_q2d(stream->time_base);
  if (!(tb > 0)) return SampleError("the video stream has no time base");
  if (fmt->duration != AV_NOPTS_VALUE &&
      double(fmt->duration) / AV_TIME_BASE > v.max_duration_seconds) {
    return SampleError(absl::StrCat("duration ", double(fmt->duration) / AV_TIME_BASE,
                                    " s exceeds max_duration_seconds (", v.max_duration_seconds,
                                    ")"));
  }

  // 1. Every frame's timestamp, from the packets (no decoding).
  std::vector<PacketTime> packets;
  AVPacket* pkt = packet_.get();
  for (;;) {
    if (input->budget_spent()) return over_time();
    const int rc = av_read_frame(fmt, pkt);
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {
      // A file cut short ends its list where its packets end; other errors are the file's.
      if (rc == AVERROR_EXIT) return over_time();
      if (!packets.empty() && avio_feof(fmt->pb)) break;
      return AvError(rc, "video: reading packets");
    }
    if (pkt->stream_index == si && !(pkt->flags & AV_PKT_FLAG_DISCARD)) {
      const int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
      if (ts == AV_NOPTS_VALUE) {
        av_packet_unref(pkt);
        return SampleError("a video packet has no timestamp");
      }
      packets.push_back({ts, (pkt->flags & AV_PKT_FLAG_KEY) != 0});
      if (packets.size() > kMaxPackets) {
        av_packet_unref(pkt);
        return SampleError(absl::StrCat("more than ", kMaxPackets, " video packets"));
      }
    }
    av_packet_unref(pkt);
  }
  if (packets.empty()) return SampleError("the video stream has no frames");
  std::vector<int64_t> pts;
  pts.reserve(packets.size());
  for (const PacketTime& p : packets) pts.push_back(p.ts);
  std::sort(pts.begin(), pts.end());
  const int64_t n = static_cast<int64_t>(pts.size());
  trace_.frames_in_video = n;
  if (double(pts.back() - pts.front()) * tb > v.max_duration_seconds) {
    return SampleError(absl::StrCat("duration ", double(pts.back() - pts.front()) * tb,
                                    " s exceeds max_duration_seconds (", v.max_duration_seconds,
                                    ")"));
  }

  // 2. The clip's frames.
  const int T = v.clip_frames;
  auto time_of = [&](int64_t i) { return double(pts[i] - pts[0]) * tb; };
  int64_t starts = 1;  // valid starts: [0, starts)
  if (v.fps > 0) {
    const double span = double(T - 1) / v.fps;
    const double last = time_of(n - 1);
    while (starts < n && time_of(starts) + span <= last + 1e-9) ++starts;
    if (time_of(0) + span > last + 1e-9) starts = 1;
  } else {
    const int64_t span = int64_t(T - 1) * v.frame_stride;
    starts = n - 1 >= span ? n - span : 1;
  }
  int64_t s = 0;
  switch (v.clip_start) {
    case ClipStart::kRandom:
      s = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(starts)));
      break;
    case ClipStart::kCenter: s = (starts - 1) / 2; break;
    case ClipStart::kStart: s = 0; break;
  }
  std::vector<int64_t>& idx = trace_.frame_indices;
  idx.resize(T);
  int64_t shown = s;  // fps: the last frame whose time is <= the clip frame's time
  for (int k = 0; k < T; ++k) {
    if (v.fps > 0) {
      const double t = time_of(s) + double(k) / v.fps + 1e-9;
      while (shown + 1 < n && time_of(shown + 1) <= t) ++shown;
      idx[k] = shown;
    } else {
      idx[k] = std::min<int64_t>(s + int64_t(k) * v.frame_stride, n - 1);
    }
  }
  for (int k = 0; k < T; ++k) trace_.frame_pts.push_back(pts[idx[k]]);

  // 3. Geometry: one box and one flip for the whole clip, drawn when the
  // first frame gives the codec's frame size (set_geometry). The box's origin
  // is aligned to the chroma grid of the decoded frames' pixel format when
  // they come (a demuxer need not know the format: MP4's does not).
  int stored_width = 0, stored_height = 0;  // the codec's, from the first frame
  int width = 0, height = 0;                // displayed
  CropBox box;
  EvalWindow window;
  bool flip = false;
  auto set_geometry = [&](const AVFrame* f) -> absl::Status {
    stored_width = f->width;
    stored_height = f->height;
    if (stored_width <= 0 || stored_height <= 0) {
      return SampleError("a decoded frame has no frame size");
    }
    if (uint64_t(stored_width) * uint64_t(stored_height) > spec.max_pixels) {
      return SampleError(absl::StrCat("frame of ", stored_width, "x", stored_height,
                                      " exceeds max_pixels (", spec.max_pixels, ")"));
    }
    width = orientation.swap ? stored_height : stored_width;
    height = orientation.swap ? stored_width : stored_height;
    box = CropBox{0, 0, height, width};
    if (spec.mode == AugmentMode::kTrain) {
      box = RandomResizedCropBox(width, height, spec, rng);
      flip = rng.Bernoulli(spec.flip_probability);
    } else {
      window = EvalCenterWindow(width, height, spec);
    }
    // The decoder's own buffers come out of max_decode_memory with the
    // codec's frames: eval keeps the whole resized frame (scratch_, 3 bytes
    // a pixel), rotation a displayed copy of the frame (oriented_).
    uint64_t extra = 0;
    if (spec.mode == AugmentMode::kEval) {
      extra += uint64_t(3) * window.resized_width * window.resized_height;
    }
    if (rotate) {
      const int copy =
          av_image_get_buffer_size(static_cast<AVPixelFormat>(f->format), width, height, 1);
      extra += copy > 0 ? uint64_t(copy) : 0;
    }
    if (frame_budget_.live_bytes() + extra > spec.max_decode_memory) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("video: frames of %dx%d need about %.1f MiB to decode%s%s, more than "
                          "max_decode_memory (%.1f MiB)",
                          width, height, Mib(frame_budget_.live_bytes() + extra),
                          spec.mode == AugmentMode::kEval ? " and resize" : "",
                          rotate ? " and rotate" : "", Mib(spec.max_decode_memory)));
    }
    frame_budget_.SetLimit(spec.max_decode_memory - extra);
    trace_.width = width;
    trace_.height = height;
    trace_.crop = box;
    trace_.window = window;
    trace_.flip = flip;
    return absl::OkStatus();
  };

  // 4. Decode from the keyframe before the clip. The codec's frame buffers
  // are counted against max_decode_memory (frame_budget_), its frames held
  // to max_pixels by FFmpeg too (codecs with their own allocator honour it).
  AvCodecContextPtr ctx(avcodec_alloc_context3(codec));
  if (ctx == nullptr) return AvError(AVERROR(ENOMEM), kWhat);
  if (int rc = avcodec_parameters_to_context(ctx.get(), par); rc < 0) {
    return AvError(rc, "video: codec parameters");
  }
  ctx->thread_count = 1;
  ctx->thread_type = 0;
  ctx->pkt_timebase = stream->time_base;
  ctx->max_pixels = static_cast<int64_t>(std::min<uint64_t>(spec.max_pixels, INT64_MAX));
  frame_budget_.Reset(spec.max_decode_memory);
  frame_budget_.Install(ctx.get());
  // A failed decoder call: the budget's refusal, the codec's frame size over
  // max_pixels, or FFmpeg's error.
  auto decode_error = [&](int rc, const std::string& what) -> absl::Status {
    if (frame_budget_.refused()) return frame_budget_.Refusal();
    if (uint64_t(std::max(ctx->width, 0)) * uint64_t(std::max(ctx->height, 0)) > spec.max_pixels) {
      return SampleError(absl::StrCat("the codec's frame of ", ctx->width, "x", ctx->height,
                                      " exceeds max_pixels (", spec.max_pixels, ")"));
    }
    absl::Status st = AvError(rc, what);
    if (rc == AVERROR(EINVAL) && ctx->width <= 0) {
      // FFmpeg refuses a size over ctx->max_pixels before it sets the size.
      return absl::Status(st.code(), absl::StrCat(st.message(), " (a frame size over max_pixels (",
                                                  spec.max_pixels, ") is refused so)"));
    }
    return st;
  };
  if (int rc = avcodec_open2(ctx.get(), codec, nullptr); rc < 0) {
    return decode_error(rc, absl::StrCat("video: opening the ", codec->name, " decoder"));
  }
  // What the codec read from its extradata, when it sets the size there.
  if (uint64_t(std::max(ctx->width, 0)) * uint64_t(std::max(ctx->height, 0)) > spec.max_pixels) {
    return SampleError(absl::StrCat("the codec's frame of ", ctx->width, "x", ctx->height,
                                    " exceeds max_pixels (", spec.max_pixels, ")"));
  }

  const int64_t first = idx.front();
  int64_t key_ts = pts.front();
  for (const PacketTime& p : packets) {
    if (p.key && p.ts <= pts[first] && p.ts > key_ts) key_ts = p.ts;
  }
  packets = {};

  const int H = spec.output_height, W = spec.output_width;
  const bool planar = spec.layout == Layout::kNCHW;
  const size_t frame_bytes = size_t(3) * H * W;
  const AVPixelFormat dst_fmt = planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24;

  // Converts `f` into clip position k.
  auto convert = [&](AVFrame* f, int k) -> absl::Status {
    uint8_t* o = out + frame_bytes * k;
    uint8_t* planes[3];  // R, G, B (planar) or the packed frame
    if (planar) {
      planes[0] = o;
      planes[1] = o + size_t(H) * W;
      planes[2] = o + 2 * size_t(H) * W;
    } else {
      planes[0] = planes[1] = planes[2] = o;
    }
    int src_w = width, src_h = height, dst_w = W, dst_h = H;
    if (spec.mode == AugmentMode::kTrain) {
      CropBox& crop = trace_.crop;  // the box, its origin on the chroma grid
      crop = box;
      if (const AVPixFmtDescriptor* d =
              av_pix_fmt_desc_get(static_cast<AVPixelFormat>(f->format))) {
        crop.left &= ~((1 << d->log2_chroma_w) - 1);
        crop.top &= ~((1 << d->log2_chroma_h) - 1);
      }
      f->crop_top = crop.top;
      f->crop_left = crop.left;
      f->crop_bottom = height - crop.top - crop.height;
      f->crop_right = width - crop.left - crop.width;
      if (int rc = av_frame_apply_cropping(f, AV_FRAME_CROP_UNALIGNED); rc < 0) {
        return AvError(rc, "video: cropping a frame");
      }
      src_w = box.width;
      src_h = box.height;
    } else {
      dst_w = window.resized_width;
      dst_h = window.resized_height;
    }
    // A fresh scaler only when its geometry, formats or colour reading
    // change (at most once per clip; sws_getCachedContext alone rebuilt it
    // every frame: it compares flags that its initialisation changes for RGB
    // output).
    const SwsKey key{src_w,
                     src_h,
                     f->format,
                     dst_w,
                     dst_h,
                     static_cast<int>(dst_fmt),
                     static_cast<int>(f->colorspace),
                     static_cast<int>(f->color_range)};
    if (sws_ == nullptr || !(key == sws_key_)) {
      sws_key_ = SwsKey{};
      sws_.reset(sws_getContext(src_w, src_h, static_cast<AVPixelFormat>(f->format), dst_w, dst_h,
                                dst_fmt, SWS_BILINEAR, nullptr, nullptr, nullptr));
      if (sws_ == nullptr) {
        return SampleError(
            absl::StrCat("cannot convert frames of pixel format ",
                         av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format))));
      }
      // As FFmpeg's scale filter: the frame's matrix and range.
      int* inv_table = nullptr;
      int* table = nullptr;
      int src_range = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
      sws_getColorspaceDetails(sws_.get(), &inv_table, &src_range, &table, &dst_range, &brightness,
                               &contrast, &saturation);
      const int* coefficients = YuvCoefficients(f->colorspace);
      if (f->color_range != AVCOL_RANGE_UNSPECIFIED) src_range = f->color_range == AVCOL_RANGE_JPEG;
      sws_setColorspaceDetails(sws_.get(), coefficients, src_range, coefficients, dst_range,
                               brightness, contrast, saturation);
      sws_key_ = key;
    }
    uint8_t* dst[4] = {nullptr, nullptr, nullptr, nullptr};
    int dst_stride[4] = {0, 0, 0, 0};
    uint8_t* target[3];
    if (spec.mode == AugmentMode::kTrain) {
      for (int p = 0; p < 3; ++p) target[p] = planes[p];
    } else {
      const size_t plane = size_t(dst_w) * dst_h;
      scratch_.resize(3 * plane);
      for (int p = 0; p < 3; ++p)
        target[p] = planar ? scratch_.data() + p * plane : scratch_.data();
    }
    if (planar) {  // GBRP's planes: G, B, R
      dst[0] = target[1];
      dst[1] = target[2];
      dst[2] = target[0];
      dst_stride[0] = dst_stride[1] = dst_stride[2] = dst_w;
    } else {
      dst[0] = target[0];
      dst_stride[0] = dst_w * 3;
    }
    const int rows = sws_scale(sws_.get(), f->data, f->linesize, 0, src_h, dst, dst_stride);
    if (rows != dst_h) return SampleError("scaling a frame failed");
    if (spec.mode == AugmentMode::kEval) {
      const int bpp = planar ? 1 : 3;
      for (int p = 0; p < (planar ? 3 : 1); ++p) {
        for (int y = 0; y < H; ++y) {
          std::memcpy(planes[p] + size_t(y) * W * bpp,
                      target[p] + (size_t(window.top + y) * dst_w + window.left) * bpp,
                      size_t(W) * bpp);
        }
      }
    }
    if (flip) FlipRows(planes, W, H, planar);
    return absl::OkStatus();
  };

  int next = 0;  // clip positions [0, next) are written
  bool restarted = false;
  bool any_frame = false;
  int64_t last_ts = 0, same_ts = 0;
  // Handles one decoded frame; sets `done` when the clip is complete and
  // `restart` when the seek landed past the clip's first frame.
  auto take = [&](AVFrame* f, bool* done, bool* restart) -> absl::Status {
    if (++trace_.frames_decoded > v.max_frames_decoded) {
      return absl::ResourceExhaustedError(
          absl::StrCat("video: the clip needs more than max_frames_decoded (", v.max_frames_decoded,
                       ") decoded frames"));
    }
    if (stored_width == 0) RETURN_IF_ERROR(set_geometry(f));
    if (f->width != stored_width || f->height != stored_height) {
      return SampleError(absl::StrCat("frame size changed from ", stored_width, "x", stored_height,
                                      " to ", f->width, "x", f->height));
    }
    int64_t ts = f->best_effort_timestamp;
    if (ts == AV_NOPTS_VALUE) ts = f->pts;
    if (ts == AV_NOPTS_VALUE) return SampleError("a decoded frame has no timestamp");
    // Frames sharing a timestamp (a broken or coarse time base) take its
    // indices in decoding order.
    const int64_t lo = std::lower_bound(pts.begin(), pts.end(), ts) - pts.begin();
    const int64_t hi = std::upper_bound(pts.begin(), pts.end(), ts) - pts.begin();
    same_ts = any_frame && ts == last_ts ? same_ts + 1 : 0;
    last_ts = ts;
    const int64_t i = hi == lo ? lo - 1 : std::min(lo + same_ts, hi - 1);
    const bool first_frame = !any_frame;
    any_frame = true;
    if (first_frame && i > idx[0] && trace_.seeked && !restarted) {
      *restart = true;
      return absl::OkStatus();
    }
    if (i < idx[next]) return absl::OkStatus();
    if (i > idx[next]) {
      return absl::DataLossError(absl::StrCat("video: frame ", idx[next], " of ", n,
                                              " did not decode (corrupt or truncated file)"));
    }
    const int k0 = next;
    if (rotate) {
      // The displayed frame, then a reference to it that convert may crop.
      RETURN_IF_ERROR(OrientFrame(f, orientation, oriented_.get()));
      if (int rc = av_frame_ref(view_.get(), oriented_.get()); rc < 0) {
        return AvError(rc, "video: rotating a frame");
      }
      absl::Status st = convert(view_.get(), k0);
      av_frame_unref(view_.get());
      RETURN_IF_ERROR(st);
    } else {
      RETURN_IF_ERROR(convert(f, k0));
    }
    while (next < T && idx[next] == i) {
      if (next != k0) std::memcpy(out + frame_bytes * next, out + frame_bytes * k0, frame_bytes);
      ++next;
    }
    *done = next == T;
    return absl::OkStatus();
  };

  // Packets of frames the clip does not use may skip decoding when no other
  // frame refers to them (AVDISCARD_NONREF): B-frames between the keyframe
  // and the clip, and between strided clip frames. Only with unique
  // timestamps, which map packets to frames one to one.
  std::vector<int64_t> needed;
  for (int64_t i : idx) needed.push_back(pts[i]);
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  const bool may_skip = std::adjacent_find(pts.begin(), pts.end()) == pts.end();

  trace_.seeked = key_ts > pts.front();
  for (int attempt = 0; attempt < 2; ++attempt) {
    int rc = trace_.seeked ? av_seek_frame(fmt, si, key_ts, AVSEEK_FLAG_BACKWARD) : -1;
    if (rc < 0) {
      trace_.seeked = false;
      rc = avformat_seek_file(fmt, si, INT64_MIN, pts.front(), pts.front(), 0);
      if (rc < 0) rc = av_seek_frame(fmt, si, pts.front(), AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY);
      if (rc < 0) return AvError(rc, "video: seeking to the start");
    }
    avcodec_flush_buffers(ctx.get());
    ctx->skip_frame = AVDISCARD_DEFAULT;
    next = 0;
    any_frame = false;
    bool done = false, restart = false, eof = false;
    while (!done && !restart) {
      if (input->budget_spent()) return over_time();
      if (!eof) {
        rc = av_read_frame(fmt, pkt);
        if (rc == AVERROR_EXIT) return over_time();
        if (rc < 0) {
          eof = true;
          rc = avcodec_send_packet(ctx.get(), nullptr);
        } else if (pkt->stream_index != si) {
          av_packet_unref(pkt);
          continue;
        } else {
          if (may_skip) {
            const int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
            ctx->skip_frame = std::binary_search(needed.begin(), needed.end(), ts)
                                  ? AVDISCARD_DEFAULT
                                  : AVDISCARD_NONREF;
          }
          rc = avcodec_send_packet(ctx.get(), pkt);
          av_packet_unref(pkt);
        }
        if (frame_budget_.refused()) return frame_budget_.Refusal();
        if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_EOF) {
          return decode_error(rc, absl::StrCat("video: decoding frame ", idx[next], " of ", n));
        }
      }
      for (;;) {
        rc = avcodec_receive_frame(ctx.get(), frame_.get());
        if (frame_budget_.refused()) {
          av_frame_unref(frame_.get());
          return frame_budget_.Refusal();
        }
        if (rc == AVERROR(EAGAIN)) break;
        if (rc == AVERROR_EOF) {
          return absl::DataLossError(absl::StrCat("video: the stream ended before frame ",
                                                  idx[next], " of ", n,
                                                  " decoded (corrupt or truncated file)"));
        }
        if (rc < 0)
          return decode_error(rc, absl::StrCat("video: decoding frame ", idx[next], " of ", n));
        absl::Status st = take(frame_.get(), &done, &restart);
        av_frame_unref(frame_.get());
        RETURN_IF_ERROR(st);
        if (done || restart) break;
      }
    }
    if (done) return absl::OkStatus();
    restarted = true;
    trace_.seeked = false;
  }
  return SampleError("could not reach the clip's first frame");
}

}  // namespace conveyor
