// Test helpers: write small JPEG files (noise + gradients, so they are not
// trivially flat) and ImageFolder trees into a temporary directory. Used by
// engine tests. Not thread-safe (tests call it from the main thread).
#pragma once

#include <jpeglib.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/base/rng.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::testing {

// Compresses interleaved pixels (w × h × components: 1 gray, 3 RGB, 4 CMYK)
// with libjpeg at `quality`; `configure` may change the compressor after the
// defaults are set (subsampling, progression, scan scripts).
inline std::vector<uint8_t> CompressJpeg(
    const std::vector<uint8_t>& pixels, int w, int h, int components, int quality = 90,
    const std::function<void(jpeg_compress_struct*)>& configure = nullptr) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = w;
  cinfo.image_height = h;
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : (components == 4 ? JCS_CMYK : JCS_RGB);
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (configure) configure(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(&pixels[static_cast<size_t>(cinfo.next_scanline) * w * components]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + out_size);
  free(out);
  return bytes;
}

// Noise over gradients (not flat, so decoding has real work), RGB.
inline std::vector<uint8_t> EncodeNoiseJpeg(int w, int h, uint64_t seed, int quality = 90) {
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  Rng rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        const int base = (x * 255 / w + y * 255 / h * (c + 1)) % 256;
        const int noise = static_cast<int>(rng.Below(64)) - 32;
        rgb[(static_cast<size_t>(y) * w + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(base + noise, 0, 255));
      }
    }
  }
  return CompressJpeg(rgb, w, h, 3, quality);
}

inline void WriteFile(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// root/class_<c>/img_<i>.jpg with sizes varying around (w, h).
inline void MakeImageFolder(const std::filesystem::path& root, int classes, int per_class,
                            int w = 96, int h = 72) {
  for (int c = 0; c < classes; ++c) {
    for (int i = 0; i < per_class; ++i) {
      const int ww = w + (i % 3) * 8, hh = h + (c % 2) * 8;
      WriteFile(
          root / ("class_" + std::to_string(c)) / ("img_" + std::to_string(1000 + i) + ".jpg"),
          EncodeNoiseJpeg(ww, hh, static_cast<uint64_t>(c * 1000 + i)));
    }
  }
}

}  // namespace conveyor::testing
