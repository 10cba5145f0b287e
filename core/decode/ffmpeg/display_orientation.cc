#include "core/decode/ffmpeg/display_orientation.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/decode/ffmpeg/error.h"

extern "C" {
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

namespace conveyor {
namespace {

// Copies one plane: out (ow x oh pixels of `step` bytes) from in (iw x ih).
template <int kStep>
void MovePlane(const uint8_t* in, int in_stride, int iw, int ih, uint8_t* out, int out_stride,
               int ow, int oh, const DisplayOrientation& o, int step_bytes) {
  const int step = kStep > 0 ? kStep : step_bytes;
  auto copy = [&](uint8_t* d, const uint8_t* s) {
    if constexpr (kStep == 1) {
      *d = *s;
    } else {
      std::memcpy(d, s, step);
    }
  };
  if (!o.swap) {
    for (int r = 0; r < oh; ++r) {
      const uint8_t* src = in + ptrdiff_t(o.reverse_rows ? ih - 1 - r : r) * in_stride;
      uint8_t* dst = out + ptrdiff_t(r) * out_stride;
      if (!o.reverse_columns) {
        std::memcpy(dst, src, size_t(ow) * step);
      } else {
        for (int c = 0; c < ow; ++c)
          copy(dst + ptrdiff_t(c) * step, src + ptrdiff_t(iw - 1 - c) * step);
      }
    }
    return;
  }
  // A quarter turn: displayed (r, c) is stored (R(c), C(r)). In tiles, so
  // that both the rows read and the rows written stay in cache.
  constexpr int kTile = 32;
  for (int r0 = 0; r0 < oh; r0 += kTile) {
    const int r1 = r0 + kTile < oh ? r0 + kTile : oh;
    for (int c0 = 0; c0 < ow; c0 += kTile) {
      const int c1 = c0 + kTile < ow ? c0 + kTile : ow;
      for (int r = r0; r < r1; ++r) {
        const int sc = o.reverse_columns ? iw - 1 - r : r;
        uint8_t* dst = out + ptrdiff_t(r) * out_stride;
        const uint8_t* src_col = in + ptrdiff_t(sc) * step;
        for (int c = c0; c < c1; ++c) {
          const int sr = o.reverse_rows ? ih - 1 - c : c;
          copy(dst + ptrdiff_t(c) * step, src_col + ptrdiff_t(sr) * in_stride);
        }
      }
    }
  }
}

}  // namespace

DisplayOrientation OrientationFromDisplayMatrix(const int32_t* m) {
  DisplayOrientation o;
  if (m == nullptr) return o;
  double theta = -std::round(av_display_rotation_get(m));
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  if (std::fabs(theta - 90) < 1.0) {
    o.swap = true;
    o.reverse_rows = !(m[3] > 0);  // transpose=clock; cclock_flip when mirrored
    o.degrees = 90;
  } else if (std::fabs(theta - 180) < 1.0) {
    o.reverse_columns = m[0] < 0;  // hflip
    o.reverse_rows = m[4] < 0;     // vflip
    o.degrees = 180;
  } else if (std::fabs(theta - 270) < 1.0) {
    o.swap = true;
    o.reverse_columns = true;   // transpose=cclock
    o.reverse_rows = m[3] < 0;  // clock_flip when mirrored
    o.degrees = 270;
  } else if (std::fabs(theta) > 1.0) {
    o.odd_angle = true;
    o.degrees = static_cast<int>(theta);
  } else {
    o.reverse_rows = m[4] < 0;  // vflip
  }
  return o;
}

DisplayOrientation StreamOrientation(const AVStream* stream) {
  size_t size = 0;
  const uint8_t* sd = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (sd == nullptr || size < 9 * sizeof(int32_t)) return {};
  int32_t matrix[9];
  std::memcpy(matrix, sd, sizeof(matrix));
  return OrientationFromDisplayMatrix(matrix);
}

absl::Status OrientFrame(const AVFrame* in, const DisplayOrientation& o, AVFrame* out) {
  const auto format = static_cast<AVPixelFormat>(in->format);
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  const char* name = desc != nullptr ? desc->name : "unknown";
  if (desc == nullptr ||
      (desc->flags & (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL)) ||
      (o.swap && desc->log2_chroma_w != desc->log2_chroma_h)) {
    return absl::InvalidArgumentError(
        absl::StrCat("video: cannot apply the rotation metadata (", o.degrees,
                     " degrees) to frames of pixel format ", name,
                     " (autorotate: false keeps the stored orientation)"));
  }
  const int ow = o.swap ? in->height : in->width;
  const int oh = o.swap ? in->width : in->height;
  if (out->format != in->format || out->width != ow || out->height != oh ||
      out->buf[0] == nullptr || !av_frame_is_writable(out)) {
    av_frame_unref(out);
    out->format = in->format;
    out->width = ow;
    out->height = oh;
    if (int rc = av_frame_get_buffer(out, 0); rc < 0) return AvError(rc, "video: rotating a frame");
  }
  out->colorspace = in->colorspace;
  out->color_range = in->color_range;
  out->color_primaries = in->color_primaries;
  out->color_trc = in->color_trc;
  out->chroma_location = in->chroma_location;
  out->pts = in->pts;
  out->best_effort_timestamp = in->best_effort_timestamp;
  int steps[4] = {0, 0, 0, 0};
  av_image_fill_max_pixsteps(steps, nullptr, desc);
  const int planes = av_pix_fmt_count_planes(format);
  for (int p = 0; p < planes; ++p) {
    const bool chroma = p == 1 || p == 2;
    const int hs = chroma ? desc->log2_chroma_w : 0;
    const int vs = chroma ? desc->log2_chroma_h : 0;
    // Stored plane size, and the displayed one (the same subsampling).
    const int iw = -((-in->width) >> hs), ih = -((-in->height) >> vs);
    const int pw = -((-ow) >> hs), ph = -((-oh) >> vs);
    if (steps[p] == 1) {
      MovePlane<1>(in->data[p], in->linesize[p], iw, ih, out->data[p], out->linesize[p], pw, ph, o,
                   1);
    } else {
      MovePlane<0>(in->data[p], in->linesize[p], iw, ih, out->data[p], out->linesize[p], pw, ph, o,
                   steps[p]);
    }
  }
  return absl::OkStatus();
}

}  // namespace conveyor
