// The entropy decoder of re-laid JPEGs (core/decode/jpeg_relayout.h): a
// crop of a copy is decoded by libjpeg as the whole image, cropped as usual
// (jpeg_crop_scanline, jpeg_skip_scanlines), but with this decoder in
// place of libjpeg's Huffman decoder. Every MCU of a copy is a restart
// interval of its own, coded from a DC prediction of zero, so MCU m can be
// decoded straight from its bytes, in any order: this decoder decodes only
// the MCUs whose blocks libjpeg transforms (the crop's columns of the rows
// it reads) and returns at once for the others (the rows libjpeg skips and
// the columns beside the crop), which libjpeg's decoder, reading the scan
// from its start, must decode. The pixels are the same: the coefficients
// are, and everything after them is libjpeg's (tests/unit/
// relaid_entropy_decoder_test.cc checks every subsampling, scale and
// crop against libjpeg's own decode).
//
// It takes libjpeg's module slot (cinfo->entropy) through libjpeg's
// internal module interface (jpegint.h: one function, decode_mcu, called
// once per MCU in raster order, also for skipped rows with no block
// buffer). Corrupt data (a code not in its table, an MCU running past its
// interval, calls out of order) is reported through libjpeg's error
// manager as its own decoder does (JWRN_HUFF_BAD_CODE), which JpegDecoder
// turns into an error naming it.
//
// Baseline Huffman decoding with a 64-bit bit buffer refilled 8 bytes at a
// time where no byte needs unstuffing, and 11-bit lookup tables whose entry
// for a short code says everything: its length, the AC run, end of block,
// and the value itself when the code and its value bits fit.
//
// Thread-safety: one per JpegDecoder (one thread); Install binds it to one
// image's decompressor until the next Install.
#pragma once

#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <memory>
#include <span>

#include <jpeglib.h>

namespace conveyor {

// The restart intervals of a JPEG with a restart marker after every MCU:
// MCU m's entropy-coded bytes are [starts[m], ends[m]) of the file.
struct McuIntervals {
  std::span<const uint32_t> starts, ends;
};

class RelaidEntropyDecoder {
 public:
  RelaidEntropyDecoder();
  ~RelaidEntropyDecoder();
  RelaidEntropyDecoder(const RelaidEntropyDecoder&) = delete;
  RelaidEntropyDecoder& operator=(const RelaidEntropyDecoder&) = delete;

  // Takes the place of `cinfo`'s entropy decoder for the rest of its image.
  // REQUIRES: jpeg_start_decompress done and any jpeg_crop_scanline called;
  // `jpeg` (the file cinfo reads) and `intervals` outlive the decode.
  // Returns false, leaving cinfo as it was, where the scan is not one this
  // decoder handles: not a single sequential Huffman scan of all
  // components, a single component not sampled 1×1, a restart interval
  // other than one MCU, an interval count that is not the MCU count or an
  // interval outside the file, or a Huffman table missing or not a prefix
  // code.
  bool Install(j_decompress_ptr cinfo, std::span<const uint8_t> jpeg,
               const McuIntervals& intervals);

  // MCUs decoded since the last Install (tests and benchmarks).
  uint64_t mcus_decoded() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace conveyor
