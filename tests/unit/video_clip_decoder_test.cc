// VideoClipDecoder on files made by the ffmpeg CLI: the clip's frames per the
// documented rule, the seek to the keyframe before the clip (only the GOP is
// decoded), padding of short videos by the last frame, the limits, and
// hostile bytes. Byte equality with ffmpeg's own decode is checked through
// the daemon (tests/integration/test_video_clips.py).
#include "core/decode/video_clip_decoder.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/unit/cpu_contention.h"
#include "tests/unit/temp_dir.h"

namespace conveyor {
namespace {

using testing::TempDir;

bool HaveFfmpeg() { return std::system("ffmpeg -version >/dev/null 2>&1") == 0; }

// `frames` frames of testsrc2 (`size`, 25 fps) with a keyframe every `gop`.
std::vector<uint8_t> MakeVideo(const TempDir& dir, const std::string& name, int frames, int gop,
                               const std::string& size = "96x64") {
  const std::string path = dir.Sub(name);
  const std::string cmd =
      absl::StrCat("ffmpeg -v error -y -f lavfi -i testsrc2=size=", size, ":rate=25 -frames:v ",
                   frames, " -c:v libx264 -pix_fmt yuv420p -bf 0 -g ", gop, " -keyint_min ", gop,
                   " -sc_threshold 0 ", path);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TransformSpec ClipSpec(int clip_frames, ClipStart start) {
  TransformSpec t;
  t.kind = MediaKind::kVideo;
  t.mode = AugmentMode::kEval;
  t.output_height = t.output_width = 16;
  t.resize_size = 16;
  t.video.clip_frames = clip_frames;
  t.video.clip_start = start;
  return t;
}

TEST_CASE("video: a clip near the end seeks to its keyframe and decodes one GOP", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  const std::vector<uint8_t> bytes = MakeVideo(dir, "gop.mp4", 100, 10);
  TransformSpec spec = ClipSpec(4, ClipStart::kStart);
  spec.video.frame_stride = 2;
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(1);
  REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok());
  CHECK(decoder.last().frame_indices == std::vector<int64_t>{0, 2, 4, 6});
  CHECK_FALSE(decoder.last().seeked);
  CHECK(decoder.last().frames_decoded == 7);

  // The centre start of [0, 100 - 6): frame 46; the keyframe before it is 40.
  spec.video.clip_start = ClipStart::kCenter;
  REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok());
  CHECK(decoder.last().frames_in_video == 100);
  CHECK(decoder.last().frame_indices == std::vector<int64_t>{46, 48, 50, 52});
  CHECK(decoder.last().seeked);
  CHECK(decoder.last().frames_decoded == 13);  // 40..52

  // Random starts: from the sample's Rng, the same for the same Rng.
  spec.video.clip_start = ClipStart::kRandom;
  std::vector<int64_t> first;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    Rng a(seed), b(seed);
    REQUIRE(decoder.Run(bytes, spec, a, out.data()).ok());
    const std::vector<int64_t> got = decoder.last().frame_indices;
    std::vector<uint8_t> again(out.size());
    REQUIRE(decoder.Run(bytes, spec, b, again.data()).ok());
    CHECK(decoder.last().frame_indices == got);
    CHECK(again == out);
    CHECK(decoder.last().frames_decoded <= 10 + 7);
    first.push_back(got[0]);
  }
  std::sort(first.begin(), first.end());
  CHECK(std::unique(first.begin(), first.end()) - first.begin() > 1);
}

TEST_CASE("video: a video shorter than the clip repeats its last frame", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  const std::vector<uint8_t> bytes = MakeVideo(dir, "short.mkv", 3, 10);
  TransformSpec spec = ClipSpec(5, ClipStart::kRandom);
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(3);
  REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok());
  CHECK(decoder.last().frame_indices == std::vector<int64_t>{0, 1, 2, 2, 2});
  const size_t frame = SampleBytes(spec) / 5;
  CHECK(std::equal(out.begin() + 2 * frame, out.begin() + 3 * frame, out.begin() + 4 * frame));
  CHECK_FALSE(std::equal(out.begin(), out.begin() + frame, out.begin() + 2 * frame));
}

TEST_CASE("video: limits and hostile bytes are errors of the sample", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  const std::vector<uint8_t> bytes = MakeVideo(dir, "v.mp4", 50, 50);
  VideoClipDecoder decoder;
  Rng rng(0);
  auto run = [&](const TransformSpec& spec, std::span<const uint8_t> b) {
    std::vector<uint8_t> out(SampleBytes(spec));
    return decoder.Run(b, spec, rng, out.data());
  };
  TransformSpec spec = ClipSpec(4, ClipStart::kCenter);
  spec.max_pixels = 96 * 64 - 1;
  absl::Status st = run(spec, bytes);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("96x64 exceeds max_pixels (6143)"));

  spec = ClipSpec(4, ClipStart::kCenter);
  spec.video.max_frames_decoded = 10;  // the clip is at 23..26, the only keyframe is 0
  st = run(spec, bytes);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(st.message()), Catch::Contains("max_frames_decoded (10)"));

  spec = ClipSpec(4, ClipStart::kCenter);
  spec.video.max_duration_seconds = 1.5;
  st = run(spec, bytes);
  CHECK_THAT(std::string(st.message()), Catch::Contains("exceeds max_duration_seconds (1.5)"));

  spec = ClipSpec(4, ClipStart::kCenter);
  spec.max_decode_seconds = 1e-9;  // spent before the first packet
  st = run(spec, bytes);
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(st.message()), Catch::Contains("longer than max_decode_seconds"));

  spec = ClipSpec(4, ClipStart::kCenter);
  for (const size_t keep : {size_t{0}, size_t{16}, bytes.size() / 3}) {
    st = run(spec, std::span<const uint8_t>(bytes.data(), keep));
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  }
  const std::vector<uint8_t> text(2000, 'a');
  CHECK(run(spec, text).code() == absl::StatusCode::kInvalidArgument);
  CHECK(run(spec, bytes).ok());  // the decoder is reusable after errors
}

// Rotation metadata: train clips of remuxed files with a display matrix
// equal ffmpeg's autorotated decode through the same crop (exact=1, at the
// box's chroma-aligned origin), scale and flip,
// with the box drawn on the displayed frame and a non-square output; with
// autorotate off, ffmpeg -noautorotate's.
TEST_CASE("video: rotation metadata is applied as ffmpeg's autorotate, train crops included",
          "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  MakeVideo(dir, "up.mp4", 24, 6);  // 96x64
  const int H = 12, W = 20;
  for (const int degrees : {90, 180, 270}) {
    const std::string path = dir.Sub(absl::StrCat("rot", degrees, ".mp4"));
    REQUIRE(std::system(absl::StrCat("ffmpeg -v error -y -i ", dir.Sub("up.mp4"),
                                     " -c copy -metadata:s:v rotate=", degrees, " ", path)
                            .c_str()) == 0);
    std::ifstream in(path, std::ios::binary);
    const std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
    for (const bool autorotate : {true, false}) {
      TransformSpec spec = ClipSpec(3, ClipStart::kRandom);
      spec.mode = AugmentMode::kTrain;
      spec.layout = Layout::kNHWC;
      spec.output_height = H;
      spec.output_width = W;
      spec.scale_min = 0.3;
      spec.scale_max = 0.6;
      spec.video.frame_stride = 2;
      spec.video.autorotate = autorotate;
      VideoClipDecoder decoder;
      std::vector<uint8_t> out(SampleBytes(spec));
      for (uint64_t seed = 0; seed < 3; ++seed) {
        Rng rng(seed);
        REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok());
        const VideoClipDecoder::Trace& t = decoder.last();
        const bool quarter = autorotate && degrees != 180;
        CHECK(t.width == (quarter ? 64 : 96));
        CHECK(t.height == (quarter ? 96 : 64));
        // The box's origin is on the 4:2:0 chroma grid (MP4's demuxer does
        // not know the pixel format: the decoded frames' is used).
        CHECK(t.crop.left % 2 == 0);
        CHECK(t.crop.top % 2 == 0);
        const std::string raw = dir.Sub("ref.rgb");
        const std::string cmd = absl::StrCat(
            "ffmpeg -v error -y ", autorotate ? "" : "-noautorotate ", "-i ", path,
            " -vf crop=", t.crop.width, ":", t.crop.height, ":", t.crop.left, ":", t.crop.top,
            ":exact=1", ",scale=", W, ":", H, ":flags=bilinear", t.flip ? ",hflip" : "",
            " -fps_mode passthrough -pix_fmt rgb24 -f rawvideo ", raw);
        REQUIRE(std::system(cmd.c_str()) == 0);
        std::ifstream ref_in(raw, std::ios::binary);
        const std::vector<uint8_t> ref(std::istreambuf_iterator<char>(ref_in), {});
        const size_t frame = size_t(H) * W * 3;
        REQUIRE(ref.size() == 24 * frame);
        for (int k = 0; k < 3; ++k) {
          INFO("rotate " << degrees << " autorotate " << autorotate << " seed " << seed << " box "
                         << t.crop.width << "x" << t.crop.height << "+" << t.crop.left << "+"
                         << t.crop.top << " flip " << t.flip << " clip frame " << k
                         << " = video frame " << t.frame_indices[k]);
          CHECK(std::equal(out.begin() + k * frame, out.begin() + (k + 1) * frame,
                           ref.begin() + t.frame_indices[k] * frame));
        }
      }
    }
  }
}

// The budget is the decoding thread's CPU time: a clip whose wall time is
// several budgets long because its thread shares a CPU with busy threads (a
// loaded host) still decodes, as long as its CPU time fits.
TEST_CASE("video: max_decode_seconds charges CPU time, not time descheduled", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  // Long enough to span many scheduler time slices: ~50 frames of 320x240.
  const std::vector<uint8_t> bytes = MakeVideo(dir, "budget.mp4", 90, 90, "320x240");
  TransformSpec spec = ClipSpec(8, ClipStart::kCenter);
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(0);
  absl::Status st;
  spec.max_decode_seconds = testing::ThriceAloneCpuSeconds(
      [&] { REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok()); });
  const std::optional<double> wall =
      testing::ContendedWallSeconds(8, [&] { st = decoder.Run(bytes, spec, rng, out.data()); });
  REQUIRE(wall.has_value());
  INFO("budget " << spec.max_decode_seconds << " s, wall when contended " << *wall << " s");
  REQUIRE(*wall > spec.max_decode_seconds);  // the case under test: descheduled past the budget
  CHECK(st.ok());
  if (!st.ok()) FAIL(st.ToString());
}

TEST_CASE("video: the spec's video fields are validated", "[video]") {
  TransformSpec t = ClipSpec(4, ClipStart::kRandom);
  CHECK(ValidateTransformSpec(t).ok());
  t.dtype = DType::kFloat32;
  CHECK_THAT(std::string(ValidateTransformSpec(t).message()), Catch::Contains("uint8"));
  t = ClipSpec(0, ClipStart::kRandom);
  CHECK_FALSE(ValidateTransformSpec(t).ok());
  t = ClipSpec(4, ClipStart::kRandom);
  t.video.fps = 10;
  t.video.frame_stride = 2;
  CHECK_THAT(std::string(ValidateTransformSpec(t).message()), Catch::Contains("exclude"));
  t = ClipSpec(4, ClipStart::kRandom);
  t.video.max_frames_decoded = 3;
  CHECK_FALSE(ValidateTransformSpec(t).ok());
  // Image pipelines ignore the video fields.
  t.kind = MediaKind::kImage;
  CHECK(ValidateTransformSpec(t).ok());
}

// Writes a 16-bit big-endian value at `at`.
void PutBe16(std::vector<uint8_t>& b, size_t at, int v) {
  b[at] = uint8_t(v >> 8);
  b[at + 1] = uint8_t(v);
}

// An MP4 whose H.264 stream (its SPS) is `coded` px square while its
// container (the avc1 sample entry and the track header) says 320x240: a
// demuxer-only reading of the size sees 320x240.
std::vector<uint8_t> MakeLyingMp4(const TempDir& dir, int coded) {
  const std::string path = dir.Sub(absl::StrCat("lie", coded, ".mp4"));
  const std::string cmd =
      absl::StrCat("ffmpeg -v error -y -f lavfi -i color=c=gray:size=", coded, "x", coded,
                   ":rate=25 -frames:v 2 -c:v libx264 -preset ultrafast -pix_fmt yuv420p ", path);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> b(std::istreambuf_iterator<char>(in), {});
  const std::string bytes(b.begin(), b.end());
  const size_t stsd = bytes.find("stsd");
  REQUIRE(stsd != std::string::npos);
  const size_t avc1 = bytes.find("avc1", stsd);  // the sample entry, not ftyp's brand
  REQUIRE(avc1 != std::string::npos);
  PutBe16(b, avc1 + 28, 320);  // sample entry: 6 reserved, index, 16 pre-defined, width, height
  PutBe16(b, avc1 + 30, 240);
  const size_t tkhd = bytes.find("tkhd");
  REQUIRE(tkhd != std::string::npos);
  const size_t end = tkhd - 4 +
                     ((size_t(b[tkhd - 4]) << 24) | (size_t(b[tkhd - 3]) << 16) |
                      (size_t(b[tkhd - 2]) << 8) | b[tkhd - 1]);
  PutBe16(b, end - 8, 320);  // width and height, 16.16 fixed point, end the box
  PutBe16(b, end - 6, 0);
  PutBe16(b, end - 4, 240);
  PutBe16(b, end - 2, 0);
  return b;
}

TEST_CASE("video: frames larger than the container says are bounded by max_decode_memory",
          "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  // 2048x2048 4:2:0 is 6 MiB a frame; with its reference frame 12 MiB.
  const std::vector<uint8_t> lie = MakeLyingMp4(dir, 2048);
  TransformSpec spec = ClipSpec(2, ClipStart::kStart);
  spec.max_decode_memory = 8u << 20;
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(0);
  absl::Status st = decoder.Run(lie, spec, rng, out.data());
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("the codec's frames are 2048x2048 (yuv420p, 1 reference frame)") &&
                 Catch::Contains("more than max_decode_memory (8.0 MiB)"));
  // Refused before the codec allocated a frame of that size.
  CHECK(decoder.last().frame_bytes_peak == 0);

  // The same lie at a size the limit allows decodes at the codec's size.
  const std::vector<uint8_t> small = MakeLyingMp4(dir, 512);
  st = decoder.Run(small, spec, rng, out.data());
  REQUIRE(st.ok());
  CHECK(decoder.last().width == 512);
  CHECK(decoder.last().height == 512);
  CHECK(decoder.last().frame_bytes_peak > 512u * 512 * 3 / 2);
  CHECK(decoder.last().frame_bytes_peak <= spec.max_decode_memory);

  // max_pixels holds against the codec's size too, not only the container's.
  spec.max_decode_memory = 128u << 20;
  spec.max_pixels = 320 * 240;
  st = decoder.Run(small, spec, rng, out.data());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(st.message()), Catch::Contains("512x512 exceeds max_pixels (76800)"));
}

TEST_CASE("video: the frame buffers of a clip are counted until they are released", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  const std::vector<uint8_t> bytes = MakeVideo(dir, "count.mp4", 30, 10);
  TransformSpec spec = ClipSpec(4, ClipStart::kCenter);
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(0);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(decoder.Run(bytes, spec, rng, out.data()).ok());
    // 96x64 4:2:0 frames, a few alive at once (the codec's references and
    // the frame being converted), never a growing count.
    CHECK(decoder.last().frame_bytes_peak >= 96u * 64 * 3 / 2);
    CHECK(decoder.last().frame_bytes_peak < 64u * 96 * 64 * 3 / 2);
    CHECK(decoder.last().frame_bytes_left == 0);  // the codec and every frame let go
  }
  // A budget too small for one frame refuses the first.
  spec.max_decode_memory = 96 * 64;
  absl::Status st = decoder.Run(bytes, spec, rng, out.data());
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(st.message()), Catch::Contains("the codec's frames are 96x64"));
  CHECK(decoder.last().frame_bytes_left == 0);
}

TEST_CASE("video: MPEG-4 Part 2 in MP4 (no frame size before decoding) decodes", "[video]") {
  REQUIRE(HaveFfmpeg());  // scripts/install-deps.sh installs it
  TempDir dir;
  const std::string path = dir.Sub("mpeg4.mp4");
  const std::string cmd = absl::StrCat(
      "ffmpeg -v error -y -f lavfi -i testsrc2=size=96x64:rate=25 -frames:v 20 -c:v mpeg4 -g 5 ",
      path);
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  TransformSpec spec = ClipSpec(4, ClipStart::kCenter);
  VideoClipDecoder decoder;
  std::vector<uint8_t> out(SampleBytes(spec));
  Rng rng(0);
  absl::Status st = decoder.Run(bytes, spec, rng, out.data());
  INFO(st.ToString());
  REQUIRE(st.ok());
  CHECK(decoder.last().width == 96);
  CHECK(decoder.last().height == 64);
  CHECK(decoder.last().frames_in_video == 20);
  // The limits apply to the decoded size.
  spec.max_pixels = 96 * 64 - 1;
  st = decoder.Run(bytes, spec, rng, out.data());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  // The codec refuses the size before it sets it (no size to name).
  CHECK_THAT(std::string(st.message()), Catch::Contains("max_pixels (6143)"));
}

}  // namespace
}  // namespace conveyor
