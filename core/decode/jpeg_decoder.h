// JpegDecoder: a reusable libjpeg(-turbo) decompressor that decodes a JPEG
// held in memory to 8-bit RGB, optionally scaled in the DCT domain (1/2, 1/4,
// 1/8) and restricted to a rectangle of the (scaled) image, so that only the
// pixels a crop needs are produced:
//   - columns: jpeg_crop_scanline (libjpeg widens the range to iMCU columns;
//     the rows handed out still start at exactly the requested column),
//   - rows above: jpeg_skip_scanlines (entropy-decoded, no IDCT/upsampling),
//   - rows below: never decoded (jpeg_abort_decompress).
// Pixels are the ones libjpeg-turbo produces with its defaults (JDCT_ISLOW,
// fancy upsampling), the same decoder settings Pillow uses, so a full-size
// decode equals PIL's Image.open(...).convert("RGB") byte for byte, CMYK
// included (see CmykToRgb below).
//
// Errors never abort the process: libjpeg's error_exit is replaced by a
// longjmp back into the decoder, libjpeg's messages are kept (never printed)
// and returned as absl::Status. libjpeg warnings that mean the pixels are wrong
// ("Premature end of JPEG file", bad Huffman/arithmetic code, premature end
// of a data segment, resync, bad progression, and extraneous bytes before a
// marker once scan data is being decoded: the entropy decoder lost sync) are
// errors too; benign ones (unknown JFIF revision, Adobe transform code, bad
// ICC marker, padding between header markers) are ignored, as Pillow does. A file must also carry
// an end-of-image marker after its scan data; this catches truncation even in
// rows below a crop that are never decoded. Corruption in rows that are never
// decoded is, by design, not detected.
//
// Limits (DecodeLimits) bound what one image may cost the calling thread:
// its pixel count and the memory libjpeg would need are checked from the
// header, before libjpeg allocates anything for the image (the big item is
// the coefficient buffer of a progressive or multi-scan file, 128 bytes per
// 8x8 block of every component, allocated by jpeg_start_decompress); libjpeg's
// own memory manager is capped at the same figure as a backstop; and the
// thread's CPU time since ReadHeader is checked in libjpeg's progress
// monitor (once per row of blocks read, or per call of the output pass), so
// a file with hundreds of scans cannot hold a worker for seconds. Limits hit
// are ResourceExhausted errors naming the limit and the figures.
//
// Every image is decoded by a new libjpeg decompressor (created in
// ReadHeader), so an image decodes, or is refused, exactly as it would be
// alone: no quantization or Huffman table of an earlier image is ever used
// (a file without DQT is refused; one without DHT gets the standard tables,
// as libjpeg-turbo does for motion-JPEG frames).
//
// Thread-safety: not thread-safe; one JpegDecoder per thread. It keeps its
// row buffers across images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace conveyor {

class RelaidEntropyDecoder;
struct McuIntervals;

enum class JpegColor { kGray, kYCbCr, kRgb, kCmyk, kYcck, kOther };

// What jpeg_read_header found.
struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  JpegColor color = JpegColor::kOther;
  bool progressive = false;
  bool arithmetic = false;
  int restart_interval = 0;  // MCUs between restart markers (0: none)
};

// What one image may cost the thread that decodes it. 0 in max_memory or
// max_cpu_seconds means no limit (tools and tests); pipelines always set
// them (TransformSpec's max_decode_memory and max_decode_seconds).
struct DecodeLimits {
  uint64_t max_pixels = 64ull * 1024 * 1024;
  // Bytes of decoder working memory: libjpeg's allocations for the image
  // plus the decoder's row buffers (EstimateDecodeMemory).
  uint64_t max_memory = 0;
  // CPU seconds of the calling thread from ReadHeader to the end of the
  // decode.
  double max_cpu_seconds = 0;
};

// A rectangle of the decoded (scaled) image: columns [x0, x1), rows [y0, y1).
struct PixelRegion {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// A tightly packed RGB image (stride = 3 * width).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

// Pillow's CMYK -> RGB conversion applied to libjpeg's JCS_CMYK output.
// Pillow always reads 4-component JPEGs as "CMYK;I" (Adobe's inverted
// storage, so ink = 255 - stored) and converts with Convert.c cmyk2rgb:
//   nk = 255 - K;  R = clip(nk - MULDIV255(C, nk)), likewise G (M) and B (Y),
//   MULDIV255(a, b) = (((a*b + 128) >> 8) + (a*b + 128)) >> 8.
// In stored values (s = 255 - ink) that is nk = sK, R = sK - MULDIV255(255 - sC, sK).
// Integer-exact, so CMYK decodes match PIL with tolerance 0.
// `in` holds n CMYK pixels (4 bytes each), `out` receives n RGB pixels;
// out may equal in (the conversion runs front to back).
void CmykToRgb(const uint8_t* in, uint8_t* out, int n);

class JpegDecoder {
 public:
  // Batches of decoded rows handed to the caller: `rows` points at pixel
  // (region.x0, y) of the first row of the batch, rows are `stride` bytes
  // apart, `count` rows, RGB. At least kRowSlack readable bytes follow the
  // region's right edge in every row of the batch, the last one included.
  // The pointer is valid only during the call.
  using RowSink = absl::FunctionRef<void(const uint8_t* rows, size_t stride, int count)>;
  static constexpr size_t kRowSlack = 64;

  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Starts a new image: checks the signature, parses the markers up to the
  // first scan and refuses images with width*height > max_pixels before
  // libjpeg allocates anything for the image. Any image in progress is
  // abandoned.
  // REQUIRES: `bytes` stays alive and unchanged until the matching Decode*
  // call returns.
  // Refuses, with ResourceExhausted naming the figures, an image whose
  // estimated working memory (EstimateDecodeMemory) exceeds limits.max_memory,
  // and starts the CPU-time budget of limits.max_cpu_seconds.
  absl::StatusOr<JpegHeader> ReadHeader(std::span<const uint8_t> bytes, const DecodeLimits& limits);
  // Only max_pixels limits this image (tools and tests).
  absl::StatusOr<JpegHeader> ReadHeader(std::span<const uint8_t> bytes, uint64_t max_pixels) {
    DecodeLimits limits;
    limits.max_pixels = max_pixels;
    return ReadHeader(bytes, limits);
  }

  // Bytes of working memory the image whose header was just read needs at
  // most for a full-size decode: the coefficient buffer (the whole image's
  // for progressive and other multi-scan files, one row of blocks
  // otherwise) plus libjpeg's and this decoder's row buffers. An upper
  // bound of what jpeg_start_decompress and the rows allocate, computed
  // from the header alone. REQUIRES: a successful ReadHeader.
  uint64_t EstimateDecodeMemory() const;

  // Size of the image decoded at scale 1/scale_denom (libjpeg's rounding:
  // ceil(width / scale_denom)).
  // REQUIRES: a successful ReadHeader; scale_denom in {1, 2, 4, 8}.
  static int ScaledSize(int full_size, int scale_denom) {
    return (full_size + scale_denom - 1) / scale_denom;
  }

  // Decodes `region` of the image scaled by 1/scale_denom and hands its rows,
  // top to bottom, to `sink` in batches. One Decode call per ReadHeader.
  // With `intervals` (a re-laid JPEG's, core/decode/jpeg_relayout.h), the
  // MCUs are decoded from their restart intervals, only those the region
  // needs (core/decode/relaid_entropy_decoder.h); the pixels are the same.
  // REQUIRES: a successful ReadHeader since the last Decode call;
  // 0 <= x0 < x1 <= scaled width, 0 <= y0 < y1 <= scaled height;
  // `intervals`, if given, are those of the bytes ReadHeader read.
  absl::Status DecodeRegion(const PixelRegion& region, int scale_denom, RowSink sink,
                            const McuIntervals* intervals = nullptr);

  // MCUs the last DecodeRegion with intervals entropy-decoded (0 if it
  // decoded through libjpeg's own decoder).
  uint64_t mcus_decoded_from_intervals() const;

  // Convenience for tools and tests: the whole image at 1/scale_denom.
  absl::Status DecodeImage(int scale_denom, RgbImage* out);

 private:
  struct State;  // libjpeg structs + jump buffer; stable address (libjpeg keeps pointers)

  // The libjpeg calls proper; each sets its own jump point and holds no
  // objects with destructors (longjmp would skip them).
  bool ReadHeaderLibjpeg(JpegHeader* header);
  bool DecodeRegionLibjpeg(const PixelRegion& region, int scale_denom, RowSink sink,
                           const McuIntervals* intervals);
  absl::Status LibjpegError(const char* what) const;
  // Whether the image read has several scans (progressive, or components in
  // separate scans): then libjpeg buffers all its coefficients.
  bool MultiScan() const;

  std::unique_ptr<State> state_;
  std::unique_ptr<RelaidEntropyDecoder> relaid_decoder_;  // made on first use
  bool relaid_installed_ = false;
  std::span<const uint8_t> bytes_;
  // Decoded rows of one batch (plus kRowSlack); grows, never shrinks.
  std::unique_ptr<uint8_t[]> batch_;
  size_t batch_capacity_ = 0;
};

}  // namespace conveyor
