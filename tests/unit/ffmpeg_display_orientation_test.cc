// AvDisplayOrientation: the ffmpeg CLI's reading of display matrices, and
// OrientFrame's pixel moves per plane (odd sizes, subsampled chroma). Byte
// equality with ffmpeg's autorotated decode is checked through the daemon
// (tests/integration/test_video_clips.py).
#include "core/decode/ffmpeg/display_orientation.h"

#include <catch2/catch.hpp>
#include <string>

extern "C" {
#include <libavutil/display.h>
}

namespace conveyor {
namespace {

// A display matrix rotating the frame `clockwise` degrees (FFmpeg's
// av_display_rotation_set), rows flipped on request.
DisplayOrientation FromAngle(double clockwise, bool vflip = false) {
  int32_t m[9];
  av_display_rotation_set(m, clockwise);
  if (vflip) av_display_matrix_flip(m, 0, 1);
  return OrientationFromDisplayMatrix(m);
}

TEST_CASE("display matrices map to ffmpeg's autorotate transforms", "[av]") {
  CHECK(OrientationFromDisplayMatrix(nullptr).identity());
  CHECK(FromAngle(0).identity());
  // 90 degrees clockwise: transpose=clock.
  DisplayOrientation o = FromAngle(90);
  CHECK(o.degrees == 90);
  CHECK((o.swap && o.reverse_rows && !o.reverse_columns));
  // 90 counterclockwise: transpose=cclock.
  o = FromAngle(-90);
  CHECK(o.degrees == 270);
  CHECK((o.swap && !o.reverse_rows && o.reverse_columns));
  // 180: hflip and vflip.
  o = FromAngle(180);
  CHECK(o.degrees == 180);
  CHECK((!o.swap && o.reverse_rows && o.reverse_columns));
  // No rotation but the rows flipped: vflip.
  o = FromAngle(0, /*vflip=*/true);
  CHECK((!o.swap && o.reverse_rows && !o.reverse_columns));
  // Other angles are not applied.
  o = FromAngle(45);
  CHECK(o.odd_angle);
  CHECK(o.identity());
  CHECK(o.degrees == 45);
}

// A frame whose every sample is distinct: plane p, row y, column x.
AvFramePtr Frame(AVPixelFormat format, int w, int h) {
  AvFramePtr f(av_frame_alloc());
  REQUIRE(f != nullptr);
  f->format = format;
  f->width = w;
  f->height = h;
  REQUIRE(av_frame_get_buffer(f.get(), 0) == 0);
  for (int p = 0; p < 3; ++p) {
    const int pw = p == 0 ? w : (w + 1) / 2, ph = p == 0 ? h : (h + 1) / 2;
    for (int y = 0; y < ph; ++y) {
      for (int x = 0; x < pw; ++x) f->data[p][y * f->linesize[p] + x] = uint8_t(p * 80 + y * 9 + x);
    }
  }
  return f;
}

TEST_CASE("OrientFrame moves each plane's samples, chroma at its own size", "[av]") {
  const int w = 7, h = 5;  // chroma 4x3
  AvFramePtr in = Frame(AV_PIX_FMT_YUV420P, w, h);
  AvFramePtr out(av_frame_alloc());
  for (const double angle : {90.0, -90.0, 180.0}) {
    const DisplayOrientation o = FromAngle(angle);
    INFO(angle);
    REQUIRE(OrientFrame(in.get(), o, out.get()).ok());
    CHECK(out->width == (o.swap ? h : w));
    CHECK(out->height == (o.swap ? w : h));
    for (int p = 0; p < 3; ++p) {
      const int iw = p == 0 ? w : 4, ih = p == 0 ? h : 3;
      const int ow = o.swap ? ih : iw, oh = o.swap ? iw : ih;
      for (int r = 0; r < oh; ++r) {
        for (int c = 0; c < ow; ++c) {
          const int a = o.swap ? c : r, b = o.swap ? r : c;
          const int sr = o.reverse_rows ? ih - 1 - a : a;
          const int sc = o.reverse_columns ? iw - 1 - b : b;
          REQUIRE(out->data[p][r * out->linesize[p] + c] == in->data[p][sr * in->linesize[p] + sc]);
        }
      }
    }
  }
  // Clockwise: the displayed top-left is the stored bottom-left.
  REQUIRE(OrientFrame(in.get(), FromAngle(90), out.get()).ok());
  CHECK(out->data[0][0] == in->data[0][(h - 1) * in->linesize[0]]);

  // A quarter turn of 4:2:2 is refused (ffmpeg converts it first); a half
  // turn is fine.
  AvFramePtr yuv422(av_frame_alloc());
  yuv422->format = AV_PIX_FMT_YUV422P;
  yuv422->width = 8;
  yuv422->height = 4;
  REQUIRE(av_frame_get_buffer(yuv422.get(), 0) == 0);
  absl::Status st = OrientFrame(yuv422.get(), FromAngle(90), out.get());
  CHECK(absl::IsInvalidArgument(st));
  CHECK_THAT(std::string(st.message()), Catch::Contains("pixel format yuv422p"));
  CHECK_THAT(std::string(st.message()), Catch::Contains("autorotate: false"));
  CHECK(OrientFrame(yuv422.get(), FromAngle(180), out.get()).ok());
}

}  // namespace
}  // namespace conveyor
