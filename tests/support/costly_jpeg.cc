#include "tests/support/costly_jpeg.h"

#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <cstdlib>
#include <functional>

#include <jpeglib.h>

namespace conveyor::testing {

namespace {

// Compresses w×h pixels produced row by row by `row_fn`, after `configure`
// adjusted libjpeg's defaults. Errors abort (libjpeg's default handler):
// the inputs are fixed by the callers.
std::vector<uint8_t> Compress(int w, int h, int components,
                              const std::function<void(int y, JSAMPLE* row)>& row_fn,
                              const std::function<void(jpeg_compress_struct*)>& configure) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&cinfo, &out, &out_size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = components;
  cinfo.in_color_space = components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  configure(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<JSAMPLE> row(static_cast<size_t>(w) * components);
  while (cinfo.next_scanline < cinfo.image_height) {
    row_fn(static_cast<int>(cinfo.next_scanline), row.data());
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&cinfo, &p, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> bytes(out, out + out_size);
  std::free(out);
  return bytes;
}

}  // namespace

std::vector<uint8_t> ManyScanGrayJpeg(int w, int h) {
  std::vector<jpeg_scan_info> scans;
  auto add = [&scans](int ss, int se, int ah, int al) {
    jpeg_scan_info s{};
    s.comps_in_scan = 1;
    s.component_index[0] = 0;
    s.Ss = ss;
    s.Se = se;
    s.Ah = ah;
    s.Al = al;
    scans.push_back(s);
  };
  // 10 is the largest point transform libjpeg accepts for 8-bit samples.
  for (int coef = 0; coef < 64; ++coef) {
    add(coef, coef, 0, 10);
    for (int al = 10; al > 0; --al) add(coef, coef, al, al - 1);
  }
  return Compress(
      w, h, 1, [w](int, JSAMPLE* row) { std::fill(row, row + w, JSAMPLE{128}); },
      [&scans](jpeg_compress_struct* cinfo) {
        cinfo->scan_info = scans.data();
        cinfo->num_scans = static_cast<int>(scans.size());
      });
}

std::vector<uint8_t> Progressive444Jpeg(int w, int h) {
  return Compress(
      w, h, 3,
      [w](int y, JSAMPLE* row) {
        for (int x = 0; x < w; ++x) {
          row[3 * x] = static_cast<JSAMPLE>(x >> 5);
          row[3 * x + 1] = static_cast<JSAMPLE>(y >> 5);
          row[3 * x + 2] = 96;
        }
      },
      [](jpeg_compress_struct* cinfo) {
        for (int c = 0; c < cinfo->num_components; ++c) {
          cinfo->comp_info[c].h_samp_factor = cinfo->comp_info[c].v_samp_factor = 1;
        }
        jpeg_simple_progression(cinfo);
      });
}

}  // namespace conveyor::testing
