// VideoClipDecoder: the decoder of video pipelines (TransformSpec::kind
// video). From one video file's bytes (MP4, MKV, WebM, MOV, AVI: any
// container FFmpeg probes from content; H.264, HEVC, VP8, VP9, AV1, MPEG-4
// as Debian's FFmpeg 5.1 decodes them) it writes one clip of T =
// video.clip_frames RGB frames, uint8, [T, 3, H, W] (NCHW) or [T, H, W, 3]
// (NHWC), straight into the batch slot.
//
// Which frames: the demuxer's packets are read once (no decoding) to list
// every frame's presentation timestamp; frame i is the i-th in presentation
// order, so variable frame rate is exact. With fps = 0 the clip is frames
// s, s + stride, ..., s + (T-1)*stride; with fps > 0 clip frame k is the
// frame shown at time t0 + k/fps (the last frame whose timestamp is <= it),
// t0 being frame s's timestamp. The start s is drawn from the sample's Rng
// (clip_start random: uniform over the starts whose clip fits), or is the
// middle (center) or first (start) fitting start. A video shorter than the
// clip starts at frame 0 and repeats its last frame to fill the clip.
// Decoding seeks to the keyframe at or before the clip's first frame
// (av_seek_frame, AVSEEK_FLAG_BACKWARD) and decodes forward only as far as
// the clip's last frame; it falls back to the start of the stream when the
// seek lands past the clip.
//
// Geometry (core/decode/crop_box.h, the image rules on the displayed frame size,
// that of the first decoded frame: the codec's, which may differ from the
// container's, and the only one MPEG-4 Part 2 in MP4 has):
// train: one RandomResizedCrop box and one flip draw per clip, the same for
// every frame; the box's origin is aligned down to the chroma grid of the
// decoded frames' pixel format (like FFmpeg's crop filter; its size is kept,
// odd or not), then libswscale scales it to the output (bilinear); a flip
// mirrors the scaled frame. Eval: libswscale resizes the whole frame so the
// shorter side is resize_size, and the centre window is kept. Rng draws, in
// order: clip start (random only), crop box, flip. Equivalent FFmpeg filter
// chains: crop=w:h:x:y:exact=1,scale=W:H:flags=bilinear[,hflip] (train, x
// and y the aligned origin) and scale=RW:RH:flags=bilinear,crop=W:H:left:top
// (eval).
// Rotation metadata (the stream's display matrix) is applied first, as the
// ffmpeg CLI does by default (core/decode/ffmpeg/display_orientation.h: quarter turns,
// half turns and flips, byte-exact), so the clip is as displayed and the
// geometry above works on the displayed size; video.autorotate = false keeps
// frames as stored (ffmpeg -noautorotate). Angles that are not multiples of
// 90 degrees are not applied; a quarter turn of a pixel format with unequal
// horizontal and vertical chroma subsampling (4:2:2) is an error of the
// sample. Odd sizes are fine.
//
// Limits (each beyond: an error of the sample, InvalidArgument or
// ResourceExhausted, with the reason): max_pixels per frame (the
// container's size when it gives one, the codec's through
// AVCodecContext.max_pixels and on the first frame), max_decode_memory for
// the codec's frame buffers (core/decode/ffmpeg/frame_budget.h: counted in
// get_buffer2 at the codec's frame size, refused before allocation) together
// with the eval resize and rotation buffers kept here,
// video.max_frames_decoded frames decoded per clip, video.max_duration_seconds
// of video, and max_decode_seconds of this thread's CPU time
// (core/decode/ffmpeg/decode_budget.h: the demuxer's interrupt callback and reader plus
// a check per packet; a wall-clock backstop at 10x the budget). FFmpeg's own threads are off
// (thread_count 1): the engine's workers are the parallelism.
//
// Thread-safety: not thread-safe; one per worker thread. Frame, packet and
// scaler state are kept between samples; buffers over 16 MiB (and scalers
// for frames over 4096 px wide) are freed after their sample.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/decode/crop_box.h"
#include "core/decode/ffmpeg/display_orientation.h"
#include "core/decode/ffmpeg/frame_budget.h"
#include "core/decode/ffmpeg/handles.h"
#include "core/decode/sample_decoder.h"

namespace conveyor {

class VideoClipDecoder final : public SampleDecoder {
 public:
  // What the last successful Run did (tests, tools).
  struct Trace {
    int width = 0;  // displayed frame size (after the rotation metadata)
    int height = 0;
    DisplayOrientation orientation;      // applied to each frame (autorotate)
    int64_t frames_in_video = 0;         // frames listed by the demuxer
    std::vector<int64_t> frame_indices;  // clip frame k = video frame frame_indices[k]
    std::vector<int64_t> frame_pts;      // their timestamps (stream time base)
    CropBox crop;                        // train: the box (after chroma alignment)
    EvalWindow window;                   // eval
    bool flip = false;
    int frames_decoded = 0;
    bool seeked = false;            // decoding started at a seek (not at the stream's start)
    uint64_t frame_bytes_peak = 0;  // most codec frame-buffer bytes alive at once
    uint64_t frame_bytes_left = 0;  // still counted after the sample (0: all released)
  };

  VideoClipDecoder();
  ~VideoClipDecoder() override;
  VideoClipDecoder(const VideoClipDecoder&) = delete;
  VideoClipDecoder& operator=(const VideoClipDecoder&) = delete;

  // REQUIRES: spec.kind == kVideo, spec validated; out has SampleBytes(spec)
  // bytes. `out` is unspecified on error.
  absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                   uint8_t* out) override;

  const Trace& last() const { return trace_; }

 private:
  absl::Status RunClip(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                       uint8_t* out);

  // Declared first: it outlives the codec context and every frame.
  AvFrameBudget frame_budget_;
  AvFramePtr frame_;
  AvFramePtr oriented_;  // autorotate: the displayed frame (its buffer reused)
  AvFramePtr view_;      // a cropped reference to oriented_
  AvPacketPtr packet_;
  // What sws_ was set up for: source size and format, output size and
  // format, the frames' colour space and range.
  struct SwsKey {
    int src_w = 0, src_h = 0, src_format = -1, dst_w = 0, dst_h = 0, dst_format = -1;
    int colorspace = -1, color_range = -1;
    bool operator==(const SwsKey&) const = default;
  };
  SwsContextPtr sws_;
  SwsKey sws_key_;
  std::vector<uint8_t> scratch_;  // eval: the whole resized frame
  Trace trace_;
};

}  // namespace conveyor
