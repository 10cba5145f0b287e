#include "core/decode/jpeg_relayout.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <cstdlib>
#include <cstring>
#include <string>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <jpeglib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace conveyor {

namespace {

// libjpeg's errors end in a longjmp back here, with the message kept;
// any warning (corrupt data libjpeg worked around) refuses the file.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {0};
};

void ErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void OutputMessage(j_common_ptr) {}  // never printed

// The source and destination of one transcoding, destroyed together.
struct Transcoder {
  ErrorManager err;
  jpeg_decompress_struct src{};
  jpeg_compress_struct dst{};
  bool src_made = false, dst_made = false;
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  ~Transcoder() {
    if (dst_made) jpeg_destroy_compress(&dst);
    if (src_made) jpeg_destroy_decompress(&src);
    std::free(out);
  }
};

// The largest divisor of n that is at most kMaxRelayIntervalMcus.
int IntervalFor(int mcus_per_row) {
  for (int k = kMaxRelayIntervalMcus; k > 1; --k) {
    if (mcus_per_row % k == 0) return k;
  }
  return 1;
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

bool StartsWith(const jpeg_saved_marker_ptr m, const char* tag, size_t n) {
  return m->data_length >= n && std::memcmp(m->data, tag, n) == 0;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> RelayJpeg(std::span<const uint8_t> jpeg) {
  Transcoder t;
  t.src.err = jpeg_std_error(&t.err.pub);
  t.dst.err = &t.err.pub;
  t.err.pub.error_exit = ErrorExit;
  t.err.pub.output_message = OutputMessage;
  if (setjmp(t.err.jump) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot re-lay JPEG: ", t.err.message));
  }
  jpeg_create_decompress(&t.src);
  t.src_made = true;
  jpeg_mem_src(&t.src, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_save_markers(&t.src, JPEG_COM, 0xFFFF);
  for (int i = 0; i < 16; ++i) jpeg_save_markers(&t.src, JPEG_APP0 + i, 0xFFFF);
  jpeg_read_header(&t.src, TRUE);
  if (t.src.arith_code) return absl::UnimplementedError("arithmetic-coded JPEG: not re-laid");
  if (t.src.data_precision != 8) {
    return absl::UnimplementedError(absl::StrCat(t.src.data_precision, "-bit JPEG: not re-laid"));
  }
  if (t.src.num_components > MAX_COMPS_IN_SCAN) {
    return absl::UnimplementedError(
        absl::StrCat("JPEG of ", t.src.num_components, " components: not re-laid"));
  }
  int blocks = 0;
  for (int c = 0; c < t.src.num_components; ++c) {
    blocks += t.src.comp_info[c].h_samp_factor * t.src.comp_info[c].v_samp_factor;
  }
  if (t.src.num_components > 1 && blocks > C_MAX_BLOCKS_IN_MCU) {
    return absl::UnimplementedError(
        absl::StrCat("JPEG with ", blocks, " blocks per MCU: not re-laid"));
  }
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(&t.src);
  if (t.err.pub.num_warnings != 0) {
    char message[JMSG_LENGTH_MAX] = {0};
    (*t.err.pub.format_message)(reinterpret_cast<j_common_ptr>(&t.src), message);
    return absl::InvalidArgumentError(absl::StrCat("cannot re-lay JPEG: ", message));
  }

  jpeg_create_compress(&t.dst);
  t.dst_made = true;
  jpeg_mem_dest(&t.dst, &t.out, &t.out_size);
  jpeg_copy_critical_parameters(&t.src, &t.dst);
  t.dst.optimize_coding = TRUE;
  const int mcu_width = t.src.num_components == 1 ? 8 : 8 * t.src.max_h_samp_factor;
  t.dst.restart_interval = static_cast<unsigned int>(
      IntervalFor(CeilDiv(static_cast<int>(t.src.image_width), mcu_width)));
  jpeg_write_coefficients(&t.dst, coefficients);
  for (jpeg_saved_marker_ptr m = t.src.marker_list; m != nullptr; m = m->next) {
    // The JFIF and Adobe markers the compressor writes itself (from the
    // colour space jpeg_copy_critical_parameters copied) are not doubled.
    if (t.dst.write_JFIF_header && m->marker == JPEG_APP0 && StartsWith(m, "JFIF\0", 5)) continue;
    if (t.dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && StartsWith(m, "Adobe", 5)) {
      continue;
    }
    jpeg_write_marker(&t.dst, m->marker, m->data, m->data_length);
  }
  jpeg_finish_compress(&t.dst);
  jpeg_finish_decompress(&t.src);
  return std::vector<uint8_t>(t.out, t.out + t.out_size);
}

absl::StatusOr<RelaidLayout> ParseRelaid(std::span<const uint8_t> b) {
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("not a re-laid JPEG: ", why));
  };
  if (b.size() < 4 || b[0] != 0xFF || b[1] != 0xD8) return bad("no start of image");
  RelaidLayout l;
  int max_h = 0, max_v = 0, components = 0;
  bool have_sof = false;
  size_t p = 2;
  while (true) {
    if (p + 4 > b.size() || b[p] != 0xFF) return bad("bad marker before the scan");
    const uint8_t marker = b[p + 1];
    const size_t length = Be16(&b[p + 2]);
    if (length < 2 || p + 2 + length > b.size()) return bad("marker segment past the end");
    const uint8_t* seg = &b[p + 4];
    if (marker == 0xC0 || marker == 0xC1) {
      if (length < 8) return bad("short frame header");
      l.sof_offset = p;
      l.height = Be16(seg + 1);
      l.width = Be16(seg + 3);
      components = seg[5];
      if (length < 8 + 3u * components || components == 0) return bad("short frame header");
      for (int c = 0; c < components; ++c) {
        max_h = std::max(max_h, seg[6 + 3 * c + 1] >> 4);
        max_v = std::max(max_v, seg[6 + 3 * c + 1] & 15);
      }
      have_sof = true;
    } else if ((marker & 0xF0) == 0xC0 && marker != 0xC4 && marker != 0xCC) {
      return bad("not a baseline frame");
    } else if (marker == 0xDD) {
      if (length != 4) return bad("bad restart interval segment");
      l.interval_mcus = Be16(seg);
    } else if (marker == 0xDA) {
      p += 2 + length;
      break;
    }
    p += 2 + length;
  }
  if (!have_sof || l.width == 0 || l.height == 0 || max_h == 0 || max_v == 0) {
    return bad("no frame header");
  }
  l.mcu_width = components == 1 ? 8 : 8 * max_h;
  l.mcu_height = components == 1 ? 8 : 8 * max_v;
  l.mcus_per_row = CeilDiv(l.width, l.mcu_width);
  l.mcu_rows = CeilDiv(l.height, l.mcu_height);
  if (l.interval_mcus == 0 || l.mcus_per_row % l.interval_mcus != 0) {
    return bad("no restart interval that tiles the MCU rows");
  }
  l.scan_offset = p;
  // The entropy-coded data: 0xFF 0x00 is a stuffed byte, 0xFF 0xFF fill,
  // 0xFF 0xD0-D7 a restart marker, 0xFF 0xD9 the end.
  const size_t total = static_cast<size_t>(l.mcus_per_row / l.interval_mcus) * l.mcu_rows;
  l.starts.reserve(total);
  l.ends.reserve(total);
  l.starts.push_back(static_cast<uint32_t>(p));
  bool ended = false;
  uint8_t stray = 0;  // a marker that may not be inside the scan
  // What the 0xFF byte at `at` is; false once the scan has ended (or not
  // well).
  auto at_ff = [&](size_t at) {
    if (at + 1 >= b.size()) return false;
    const uint8_t m = b[at + 1];
    if (m == 0x00 || m == 0xFF) return true;  // stuffing; fill before a marker
    if (m >= 0xD0 && m <= 0xD7) {
      if (m != 0xD0 + l.ends.size() % 8) {  // RST0..7 in turn, as T.81 numbers them
        stray = m;
        return false;
      }
      l.ends.push_back(static_cast<uint32_t>(at));
      l.starts.push_back(static_cast<uint32_t>(at + 2));
      return true;
    }
    if (m == 0xD9) {
      l.ends.push_back(static_cast<uint32_t>(at));
      ended = true;
    } else {
      stray = m;
    }
    return false;
  };
  // 16 bytes at a time: the 0xFF bytes are few (a marker per interval and
  // the stuffed bytes), and each is looked at once.
  bool going = true;
#ifdef __SSE2__
  const __m128i ff = _mm_set1_epi8(static_cast<char>(0xFF));
  for (; going && p + 16 <= b.size(); p += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b[p]));
    for (unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(v, ff)));
         going && mask != 0; mask &= mask - 1) {
      going = at_ff(p + static_cast<size_t>(__builtin_ctz(mask)));
    }
  }
#endif
  for (; going && p < b.size(); ++p) {
    if (b[p] == 0xFF) going = at_ff(p);
  }
  if (stray >= 0xD0 && stray <= 0xD7) {
    return bad(
        absl::StrFormat("restart marker %d where %d was due", stray - 0xD0, l.ends.size() % 8));
  }
  if (stray != 0) return bad(absl::StrFormat("marker 0x%02X inside the scan", stray));
  if (!ended) return bad("no end of image after the scan");
  if (l.starts.size() != total) {
    return bad(absl::StrFormat("%d restart intervals, expected %d", l.starts.size(), total));
  }
  return l;
}

McuRect RectForRegion(const RelaidLayout& l, const PixelRegion& region, int scale_denom,
                      int* offset_x, int* offset_y) {
  // A block of 8×8 pixels decodes to (8/denom)² when scaled, so MCU
  // boundaries fall on whole scaled pixels.
  const int mw = l.mcu_width / scale_denom, mh = l.mcu_height / scale_denom;
  McuRect r;
  r.col0 = std::max(0, region.x0 - 1) / mw;
  r.col1 = std::min(l.mcus_per_row, CeilDiv(region.x1 + 1, mw));
  r.row0 = std::max(0, region.y0 - 1) / mh;
  r.row1 = std::min(l.mcu_rows, CeilDiv(region.y1 + 1, mh));
  // Narrow rectangles grow to the right, then to the left.
  r.col1 = std::min(l.mcus_per_row, std::max(r.col1, r.col0 + kMinRectColumns));
  r.col0 = std::max(0, std::min(r.col0, r.col1 - kMinRectColumns));
  const int k = l.interval_mcus;
  r.col0 = r.col0 / k * k;
  r.col1 = std::min(l.mcus_per_row, CeilDiv(r.col1, k) * k);
  *offset_x = r.col0 * mw;
  *offset_y = r.row0 * mh;
  return r;
}

absl::Status ExtractMcuRect(std::span<const uint8_t> relaid, const RelaidLayout& l,
                            const McuRect& r, std::vector<uint8_t>* out) {
  const int k = l.interval_mcus;
  if (r.col0 < 0 || r.row0 < 0 || r.col0 >= r.col1 || r.row0 >= r.row1 || r.col1 > l.mcus_per_row ||
      r.row1 > l.mcu_rows || r.col0 % k != 0 || (r.col1 % k != 0 && r.col1 != l.mcus_per_row)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MCU rectangle [%d,%d)x[%d,%d) is not whole restart intervals of the %dx%d MCUs "
        "(intervals of %d)",
        r.col0, r.col1, r.row0, r.row1, l.mcus_per_row, l.mcu_rows, k));
  }
  const int width = std::min(r.col1 * l.mcu_width, l.width) - r.col0 * l.mcu_width;
  const int height = std::min(r.row1 * l.mcu_height, l.height) - r.row0 * l.mcu_height;
  const int first = r.col0 / k, last = r.col1 / k;  // intervals [first, last) of each row
  size_t bytes = l.scan_offset + 2;
  for (int row = r.row0; row < r.row1; ++row) {
    const size_t base = static_cast<size_t>(row) * l.intervals_per_row();
    bytes += l.ends[base + last - 1] - l.starts[base + first] + 2;
  }
  out->clear();
  out->reserve(bytes);
  // Headers as they are, the frame's height and width patched.
  out->insert(out->end(), relaid.begin(), relaid.begin() + static_cast<ptrdiff_t>(l.scan_offset));
  uint8_t* sof = out->data() + l.sof_offset + 4;
  sof[1] = static_cast<uint8_t>(height >> 8);
  sof[2] = static_cast<uint8_t>(height & 0xFF);
  sof[3] = static_cast<uint8_t>(width >> 8);
  sof[4] = static_cast<uint8_t>(width & 0xFF);
  // The intervals of each row; the markers between them numbered afresh.
  int n = 0;
  for (int row = r.row0; row < r.row1; ++row) {
    const size_t base = static_cast<size_t>(row) * l.intervals_per_row();
    for (int i = first; i < last; ++i) {
      if (n != 0) {
        out->push_back(0xFF);
        out->push_back(static_cast<uint8_t>(0xD0 + (n - 1) % 8));
      }
      const uint32_t s = l.starts[base + i], e = l.ends[base + i];
      out->insert(out->end(), relaid.begin() + s, relaid.begin() + e);
      ++n;
    }
  }
  out->push_back(0xFF);
  out->push_back(0xD9);
  return absl::OkStatus();
}

}  // namespace conveyor
