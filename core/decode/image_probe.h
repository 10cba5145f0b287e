// ProbeImage: what the FFmpeg-decoded image formats (PNG, GIF, WebP, BMP,
// TIFF) say about an image in their headers — its dimensions and how many
// bytes a pixel of the decoded frame takes — read from the bytes alone,
// before any decoder allocates anything, so that max_pixels and
// max_decode_memory refuse a hostile header cheaply. It also checks the
// container's structure where a truncation would otherwise go unnoticed
// (FFmpeg's decoders hand out partly decoded images without an error):
//   - PNG: the chunk sequence must be whole up to IEND;
//   - GIF: the blocks up to the end of the first image's data must be there;
//   - WebP: the RIFF size must not claim more bytes than the file has;
//   - BMP: the pixel array of an uncompressed bitmap must be there.
// And for PNG, CheckPngInflate bounds the IDAT stream: one whose zlib data
// inflates to more than the image's rows (a decompression bomb) is refused
// before FFmpeg inflates all of it.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace conveyor {

struct ImageProbe {
  const char* format = "";  // ImageFormatName: "PNG", "GIF", "WebP", "BMP", "TIFF"
  int width = 0;
  int height = 0;
  // Bytes per pixel of the frame FFmpeg decodes to (upper bound).
  int frame_bytes_per_pixel = 4;
  // PNG: the zlib stream's bytes (the IDAT chunks' data, in order) and the
  // bytes it must inflate to (filter bytes included; an upper bound for
  // interlaced images).
  uint64_t png_idat_bytes = 0;
  uint64_t png_raw_bytes = 0;
};

// Whether `format` (an ImageFormatName) is one ProbeImage and the FFmpeg
// image decoder handle.
bool IsFfmpegImageFormat(const char* format);

// Reads the header of `bytes`, whose ImageFormatName is `format`.
// InvalidArgument for a header that is malformed or has dimensions <= 0,
// DataLoss ("truncated PNG data (...)") for a file cut short; messages name
// the format. REQUIRES: IsFfmpegImageFormat(format).
absl::StatusOr<ImageProbe> ProbeImage(std::span<const uint8_t> bytes, const char* format);

// Inflates the IDAT stream of a probed PNG into a small window, stopping as
// soon as it produces more than probe.png_raw_bytes (InvalidArgument naming
// the figures) or the thread's CPU time passes cpu_deadline_ns (0: none;
// ResourceExhausted). A stream that ends early or is corrupt is left to the
// decoder. Skipped (OK at once) when the compressed size is too small for
// the stream to inflate to much more than the image, or for inflating it to
// take longer than max_cpu_seconds (> 0): then FFmpeg's single inflate is
// bounded by the budget, and most photos are inflated only once.
// REQUIRES: probe came from ProbeImage(bytes, "PNG").
absl::Status CheckPngInflate(std::span<const uint8_t> bytes, const ImageProbe& probe,
                             int64_t cpu_deadline_ns, double max_cpu_seconds);

}  // namespace conveyor
