// FfmpegImageDecoder: decodes a still image in a format other than JPEG —
// PNG, GIF (its first frame), WebP, BMP, TIFF, chosen by the caller from the
// file's magic bytes (ImageFormatName) — with libavcodec, and hands out rows
// of a region of it as 8-bit RGB, the same RowSink contract as JpegDecoder,
// so SampleTransformer's crop/resize/flip/convert code serves both.
//
// Conversion to RGB follows Pillow's Image.open(f).convert("RGB"):
//   - alpha is dropped (not composited): RGBA, LA, tRNS, palette alpha;
//   - grey (1, 2, 4, 8 bits) and palette entries become RGB;
//   - 16-bit samples keep their high byte (Pillow reads 16-bit RGB(A) and
//     LA PNGs so). One deliberate difference: Pillow opens a 16-bit grey PNG
//     as mode "I" and convert("RGB") clips it at 255 instead of scaling; here
//     it is scaled like every other 16-bit image (the high byte);
//   - lossy WebP (YUV 4:2:0 from FFmpeg's VP8 decoder) is converted with
//     libwebp's "fancy" chroma upsampling and fixed-point matrix, as Pillow
//     (libwebp) does, so it too matches bit for bit; other pixel formats
//     FFmpeg may produce (15/16-bit BMP, planar TIFF) go through libswscale.
//
// Limits, as for JPEG (DecodeLimits): max_pixels and max_decode_memory are
// checked from the header (ProbeImage) before anything is decoded, and
// libavcodec's own max_pixels is set as a backstop; the CPU-time budget is
// checked around each libavcodec call, while converting, and inside the
// PNG inflate check (CheckPngInflate), which stops a decompression bomb
// before FFmpeg inflates it. A single libavcodec call cannot be interrupted;
// the formats' work per call is bounded by the probed dimensions.
//
// FFmpeg's own threading is off (thread_count 1): one decode per worker.
// The codec contexts (one per format), the frame, the packet buffer and the
// libswscale context are kept between images; a context that failed is
// replaced, so no state of a bad image reaches the next one.
//
// Thread-safety: not thread-safe; one FfmpegImageDecoder per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decode/ffmpeg/handles.h"
#include "core/decode/image_probe.h"
#include "core/decode/jpeg_decoder.h"

namespace conveyor {

class FfmpegImageDecoder {
 public:
  using RowSink = JpegDecoder::RowSink;
  static constexpr size_t kRowSlack = JpegDecoder::kRowSlack;

  FfmpegImageDecoder();
  ~FfmpegImageDecoder();
  FfmpegImageDecoder(const FfmpegImageDecoder&) = delete;
  FfmpegImageDecoder& operator=(const FfmpegImageDecoder&) = delete;

  // Starts a new image whose ImageFormatName is `format`: probes its header
  // and checks the limits (InvalidArgument "PNG image WxH exceeds max_pixels
  // N", ResourceExhausted for max_decode_memory; DataLoss for a truncated
  // container). Starts the CPU budget.
  // REQUIRES: IsFfmpegImageFormat(format); `bytes` stays alive and unchanged
  // until the matching DecodeRegion returns.
  absl::StatusOr<ImageProbe> ReadHeader(std::span<const uint8_t> bytes, const char* format,
                                        const DecodeLimits& limits);

  // Decodes the image and hands the rows of `region` (full-size pixels), top
  // to bottom, to `sink` as RGB, with kRowSlack readable bytes after the
  // region's right edge in every row. Errors name the format: DataLoss
  // "corrupt or truncated PNG data: ...", ResourceExhausted for the time
  // budget. REQUIRES: a successful ReadHeader since the last DecodeRegion;
  // 0 <= x0 < x1 <= width, 0 <= y0 < y1 <= height.
  absl::Status DecodeRegion(const PixelRegion& region, RowSink sink);

  // Estimated working memory of an image: its decoded frame plus the row
  // batches.
  static uint64_t EstimateDecodeMemory(const ImageProbe& probe);

 private:
  struct Codec;
  absl::Status Decode();
  absl::Status CheckTime(const char* where) const;
  absl::Status ConvertRows(const PixelRegion& region, RowSink sink);

  std::unique_ptr<Codec> codecs_[5];  // by format; made on first use
  Codec* codec_ = nullptr;            // the current image's
  std::span<const uint8_t> bytes_;
  ImageProbe probe_;
  DecodeLimits limits_;
  int64_t cpu_deadline_ns_ = 0;
  AvFramePtr frame_;
  AvPacketPtr packet_;
  AvBufferPtr packet_buffer_;       // the file's bytes plus FFmpeg's input padding
  SwsContextPtr sws_;               // for formats converted by libswscale (YUV)
  std::unique_ptr<uint8_t[]> rgb_;  // libswscale's whole-image RGB output
  size_t rgb_capacity_ = 0;
  std::unique_ptr<uint8_t[]> batch_;  // converted rows of one batch (+ slack)
  size_t batch_capacity_ = 0;
};

}  // namespace conveyor
