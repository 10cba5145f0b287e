// Test helpers for re-laid JPEGs (core/decode/jpeg_relayout.h): JPEGs of
// every subsampling and coding the re-laying handles (noise over gradients,
// so that every block has AC coefficients), and the pixels of a region as
// JpegDecoder gives them, through libjpeg's decoder or, with intervals,
// through the re-laid copy's own (core/decode/relaid_entropy_decoder.h).
// Used by jpeg_relayout_test and relaid_entropy_decoder_test. Not
// thread-safe (tests call them from the main thread).
#pragma once

#include <jpeglib.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/relaid_entropy_decoder.h"
#include "tests/unit/test_images.h"

namespace conveyor::testing {

// Noise over gradients with `components` channels.
inline std::vector<uint8_t> Pixels(int w, int h, int components, uint64_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * components);
  Rng rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < components; ++c) {
        const int base = (x * 255 / w * (c + 1) + y * 255 / h) % 256;
        const int v = base + static_cast<int>(rng.Below(48)) - 24;
        px[(static_cast<size_t>(y) * w + x) * components + c] =
            static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
    }
  }
  return px;
}

struct Case {
  std::string name;
  int components;
  int h0, v0;  // sampling of the first component (others 1×1)
  bool progressive;
};

inline std::vector<uint8_t> Make(const Case& c, int w, int h, uint64_t seed) {
  return CompressJpeg(Pixels(w, h, c.components, seed), w, h, c.components, 85,
                      [&](jpeg_compress_struct* cinfo) {
                        cinfo->comp_info[0].h_samp_factor = c.h0;
                        cinfo->comp_info[0].v_samp_factor = c.v0;
                        for (int i = 1; i < cinfo->num_components; ++i) {
                          cinfo->comp_info[i].h_samp_factor = 1;
                          cinfo->comp_info[i].v_samp_factor = 1;
                        }
                        if (c.progressive) jpeg_simple_progression(cinfo);
                      });
}

// The pixels of `region` of `jpeg` scaled by 1/denom, as the decoder gives
// them (RGB rows, packed); with `intervals` (a re-laid copy's), decoded
// through the copy's entropy decoder, *mcus_decoded receiving the MCUs it
// decoded (0: not installed, libjpeg's own decoder ran).
inline std::vector<uint8_t> Decode(std::span<const uint8_t> jpeg, const PixelRegion& region,
                                   int denom, const McuIntervals* intervals = nullptr,
                                   uint64_t* mcus_decoded = nullptr) {
  JpegDecoder d;
  REQUIRE(d.ReadHeader(jpeg, 64u << 20).ok());
  std::vector<uint8_t> out;
  const size_t row = static_cast<size_t>(region.x1 - region.x0) * 3;
  const absl::Status st = d.DecodeRegion(
      region, denom,
      [&](const uint8_t* rows, size_t stride, int count) {
        for (int i = 0; i < count; ++i) {
          const uint8_t* r = rows + static_cast<size_t>(i) * stride;
          out.insert(out.end(), r, r + row);
        }
      },
      intervals);
  if (mcus_decoded != nullptr) *mcus_decoded = d.mcus_decoded_from_intervals();
  INFO(st.ToString());
  REQUIRE(st.ok());
  return out;
}

inline int Scaled(int v, int denom) { return (v + denom - 1) / denom; }

inline const std::vector<Case> kCases = {
    {"4:2:0", 3, 2, 2, false},
    {"4:2:2", 3, 2, 1, false},
    {"4:4:4", 3, 1, 1, false},
    {"4:4:0", 3, 1, 2, false},
    {"grey", 1, 1, 1, false},
    {"4:2:0 progressive", 3, 2, 2, true},
    {"grey progressive", 1, 1, 1, true},
    {"CMYK", 4, 1, 1, false},
};

}  // namespace conveyor::testing
