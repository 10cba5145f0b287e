// JPEG re-laying: a lossless copy of a JPEG whose entropy-coded data can be
// cut, so that a crop decodes only the entropy data it covers (the Huffman
// decoding of every block above and beside a crop is most of the cost of a
// crop decode; see issue "Past the Huffman wall").
//
// RelayJpeg transcodes a JPEG without decoding it to pixels: libjpeg reads
// its DCT coefficients and writes them back as one baseline scan with
// Huffman tables fitted to the image and restart markers every
// `interval_mcus` MCUs, a divisor of the MCUs per row, so restart intervals
// tile each MCU row. Coefficients, quantization tables and sampling are
// unchanged, so every pixel decoded from the copy equals the original's
// (progressive files become baseline: the same coefficients, one scan).
// Markers other than the frame's (APPn, COM: EXIF, ICC, Adobe) are kept.
//
// In the copy each restart interval is entropy-coded alone (the DC
// predictions restart), so ExtractMcuRect can assemble a smaller JPEG of
// any rectangle of whole intervals: the same headers with the frame's size
// patched, the intervals' bytes copied as they are and the restart markers
// between them renumbered. RectForRegion picks the rectangle a decode of a
// pixel region needs: the MCUs that hold the region and the one pixel
// beside it on each side, which is every neighbour libjpeg's chroma
// upsampling reads (its triangle filters reach one chroma sample, two
// pixels, and an MCU boundary never splits a chroma sample); decoding the
// region from the smaller JPEG then gives the same pixels as decoding it
// from the original (tests/unit/jpeg_relayout_test.cc checks this over
// sizes, subsamplings, progressive and CMYK files, scales, and regions whose
// edges lie on, beside and one pixel off MCU boundaries).
//
// A crop of a copy itself (a marker after every MCU) is decoded without a
// smaller JPEG: JpegDecoder decodes it with the copy's own entropy decoder
// (core/decode/relaid_entropy_decoder.h), which reads each MCU it needs
// from its interval in `starts`/`ends`. ExtractMcuRect serves JPEGs whose
// intervals span several MCUs.
//
// Files that cannot be re-laid (arithmetic coding, 12-bit samples, more
// blocks per MCU than one scan may hold, corrupt data) are refused with
// Unimplemented or InvalidArgument, and are served as they are.
//
// Thread-safety: pure functions of their arguments; safe to call from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decode/jpeg_decoder.h"

namespace conveyor {

// The most MCUs a restart interval of a re-laid JPEG spans. One: every MCU
// can be cut out alone. Measured on 300 ImageNet-like JPEGs (bench/
// relay_bench.cc, train 224): intervals of at most 1, 2, 4 and 8 MCUs made
// the copies 1.000, 0.995, 0.990 and 0.986 times the originals' size (the
// fitted Huffman tables pay for the markers) and the decode + augment path
// 1.20, 1.18, 1.16 and 1.09 times faster.
inline constexpr int kMaxRelayIntervalMcus = 1;

// Where things are in a re-laid JPEG (ParseRelaid).
struct RelaidLayout {
  int width = 0, height = 0;          // pixels
  int mcu_width = 0, mcu_height = 0;  // pixels of one MCU
  int mcus_per_row = 0, mcu_rows = 0;
  int interval_mcus = 0;   // divides mcus_per_row
  size_t sof_offset = 0;   // of the SOF marker's segment (its 0xFF)
  size_t scan_offset = 0;  // of the first byte of entropy-coded data
  // Restart interval i (raster order) is bytes [starts[i], ends[i]).
  std::vector<uint32_t> starts, ends;
  int intervals_per_row() const { return mcus_per_row / interval_mcus; }
};

// MCU columns [col0, col1) and rows [row0, row1) of a re-laid JPEG.
struct McuRect {
  int col0 = 0, col1 = 0, row0 = 0, row1 = 0;
};

// The lossless copy of `jpeg` described above.
absl::StatusOr<std::vector<uint8_t>> RelayJpeg(std::span<const uint8_t> jpeg);

// The layout of a JPEG written by RelayJpeg. InvalidArgument if it is not
// one (no restart interval that tiles the rows, interval count wrong, ...).
absl::StatusOr<RelaidLayout> ParseRelaid(std::span<const uint8_t> relaid);

// The rectangle of whole restart intervals that decoding `region` of the
// image scaled by 1/scale_denom needs: the MCUs of the region widened by one
// scaled pixel on each side where the image has it, and at least
// kMinRectColumns MCU columns where the image has them (libjpeg picks a
// plainer upsampler for a component at most two samples wide, which would
// change the pixels). *offset_x, *offset_y receive the rectangle's top-left
// corner in scaled pixels (subtract it from the region to address the
// smaller JPEG).
inline constexpr int kMinRectColumns = 3;
McuRect RectForRegion(const RelaidLayout& layout, const PixelRegion& region, int scale_denom,
                      int* offset_x, int* offset_y);

// Writes into *out a JPEG of `rect` of `relaid` (whose layout is `layout`).
// InvalidArgument if the rectangle is empty, outside the image, or its
// columns do not start and end on interval boundaries (or the image's edge).
absl::Status ExtractMcuRect(std::span<const uint8_t> relaid, const RelaidLayout& layout,
                            const McuRect& rect, std::vector<uint8_t>* out);

}  // namespace conveyor
