#include "core/decode/image_probe.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/thread_cpu_clock.h"

namespace conveyor {
namespace {

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
uint32_t Le32(const uint8_t* p) {
  return (uint32_t{p[3]} << 24) | (uint32_t{p[2]} << 16) | (uint32_t{p[1]} << 8) | p[0];
}
uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

absl::Status Truncated(const char* format, absl::string_view detail) {
  return absl::DataLossError(absl::StrCat("truncated ", format, " data (", detail, ")"));
}
absl::Status Corrupt(const char* format, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat("corrupt ", format, " header (", detail, ")"));
}

constexpr uint8_t kPngSignatureBytes = 8;
// Deflate's largest expansion (258-byte matches coded in about 2 bits).
constexpr uint64_t kDeflateMaxRatio = 1032;
// zlib's inflate of a maximally compressed stream measured about 450 MB/s
// of output on a loaded development machine; taken lower for margin.
constexpr double kSlowestInflateBytesPerSecond = 250e6;

// The bytes the zlib stream of a PNG inflates to: one filter byte and the
// packed samples of every row (of every Adam7 pass when interlaced).
uint64_t PngRawBytes(uint64_t w, uint64_t h, uint64_t bits_per_pixel, bool interlaced) {
  auto rows = [&](uint64_t pw, uint64_t ph) {
    return pw == 0 || ph == 0 ? 0 : ph * (1 + (pw * bits_per_pixel + 7) / 8);
  };
  if (!interlaced) return rows(w, h);
  static constexpr int kPasses[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                        {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
  uint64_t total = 0;
  for (const auto& p : kPasses) {
    const uint64_t pw = w > static_cast<uint64_t>(p[0]) ? (w - p[0] + p[2] - 1) / p[2] : 0;
    const uint64_t ph = h > static_cast<uint64_t>(p[1]) ? (h - p[1] + p[3] - 1) / p[3] : 0;
    total += rows(pw, ph);
  }
  return total;
}

// Calls visit(type, data, length) for each chunk after the signature until
// IEND (inclusive); DataLoss when the sequence is cut short.
template <typename Visit>
absl::Status WalkPngChunks(std::span<const uint8_t> b, Visit visit) {
  size_t at = kPngSignatureBytes;
  while (true) {
    if (b.size() - at < 12) {
      return Truncated("PNG", at == b.size() ? "no IEND chunk"
                                             : absl::StrFormat("chunk header cut at byte %d", at));
    }
    const uint32_t length = Be32(b.data() + at);
    if (length > 0x7FFFFFFFu) return Corrupt("PNG", "chunk length over 2^31");
    const uint8_t* type = b.data() + at + 4;
    if (b.size() - at - 12 < length) {
      return Truncated("PNG",
                       absl::StrFormat("%s chunk of %d bytes cut at byte %d",
                                       std::string(reinterpret_cast<const char*>(type), 4).c_str(),
                                       length, b.size()));
    }
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = type[i];
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) {
        return Corrupt("PNG", absl::StrFormat("bad chunk type at byte %d", at + 4));
      }
    }
    visit(type, b.data() + at + 8, length);
    if (std::memcmp(type, "IEND", 4) == 0) return absl::OkStatus();
    at += 12 + static_cast<size_t>(length);
  }
}

absl::StatusOr<ImageProbe> ProbePng(std::span<const uint8_t> b) {
  ImageProbe p;
  p.format = "PNG";
  if (b.size() < kPngSignatureBytes + 8 + 13 + 4) return Truncated("PNG", "no complete IHDR chunk");
  if (Be32(b.data() + 8) != 13 || std::memcmp(b.data() + 12, "IHDR", 4) != 0) {
    return Corrupt("PNG", "the first chunk is not a 13-byte IHDR");
  }
  const uint8_t* ihdr = b.data() + 16;
  const uint32_t w = Be32(ihdr), h = Be32(ihdr + 4);
  const int depth = ihdr[8], color = ihdr[9];
  const bool interlaced = ihdr[12] == 1;
  if (w == 0 || h == 0 || w > 0x7FFFFFFFu || h > 0x7FFFFFFFu) {
    return Corrupt("PNG", absl::StrFormat("dimensions %dx%d", w, h));
  }
  int channels = 0;
  bool depth_ok = false;
  switch (color) {
    case 0:
      channels = 1;
      depth_ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16;
      break;
    case 2:
      channels = 3;
      depth_ok = depth == 8 || depth == 16;
      break;
    case 3:
      channels = 1;
      depth_ok = depth == 1 || depth == 2 || depth == 4 || depth == 8;
      break;
    case 4:
      channels = 2;
      depth_ok = depth == 8 || depth == 16;
      break;
    case 6:
      channels = 4;
      depth_ok = depth == 8 || depth == 16;
      break;
    default: break;
  }
  if (!depth_ok || ihdr[10] != 0 || ihdr[11] != 0 || ihdr[12] > 1) {
    return Corrupt("PNG", absl::StrFormat("bit depth %d, colour type %d, compression %d, filter "
                                          "%d, interlace %d",
                                          depth, color, ihdr[10], ihdr[11], ihdr[12]));
  }
  p.width = static_cast<int>(w);
  p.height = static_cast<int>(h);
  // FFmpeg expands to 8 bits a sample (or keeps 16), and adds an alpha
  // channel for a tRNS chunk; palette images stay one byte a pixel.
  const int wide = depth == 16 ? 2 : 1;
  p.frame_bytes_per_pixel = color == 3 ? 1 : (channels + (color == 0 || color == 2 ? 1 : 0)) * wide;
  p.png_raw_bytes = PngRawBytes(w, h, static_cast<uint64_t>(channels) * depth, interlaced);
  uint64_t idat = 0;
  absl::Status walked = WalkPngChunks(b, [&](const uint8_t* type, const uint8_t*, uint32_t len) {
    if (std::memcmp(type, "IDAT", 4) == 0) idat += len;
  });
  if (!walked.ok()) return walked;
  if (idat == 0) return Corrupt("PNG", "no IDAT chunk");
  p.png_idat_bytes = idat;
  return p;
}

absl::StatusOr<ImageProbe> ProbeGif(std::span<const uint8_t> b) {
  ImageProbe p;
  p.format = "GIF";
  p.frame_bytes_per_pixel = 4;  // FFmpeg decodes GIF to 32-bit BGRA
  if (b.size() < 13) return Truncated("GIF", "no complete screen descriptor");
  p.width = Le16(b.data() + 6);
  p.height = Le16(b.data() + 8);
  if (p.width == 0 || p.height == 0) {
    return Corrupt("GIF", absl::StrFormat("screen %dx%d", p.width, p.height));
  }
  size_t at = 13;
  if (b[10] & 0x80) at += 3u << ((b[10] & 7) + 1);
  // Sub-blocks: a size byte, that many bytes, ... until a size of 0.
  auto skip_sub_blocks = [&](size_t* pos) {
    while (*pos < b.size()) {
      const size_t n = b[*pos];
      ++*pos;
      if (n == 0) return true;
      *pos += n;
    }
    return false;
  };
  const absl::Status cut = Truncated("GIF", "the first image's data is cut short");
  while (true) {
    if (at >= b.size()) return cut;
    const uint8_t block = b[at];
    if (block == 0x21) {  // extension: label, sub-blocks
      at += 2;
      if (!skip_sub_blocks(&at)) return cut;
    } else if (block == 0x2C) {  // the first image: descriptor, colour table, LZW data
      if (b.size() - at < 11) return cut;
      const uint8_t packed = b[at + 9];
      at += 10;
      if (packed & 0x80) at += 3u << ((packed & 7) + 1);
      ++at;  // LZW minimum code size
      if (!skip_sub_blocks(&at)) return cut;
      return p;
    } else if (block == 0x3B) {
      return Corrupt("GIF", "the file ends before any image");
    } else {
      return Corrupt("GIF", absl::StrFormat("unknown block 0x%02x at byte %d", block, at));
    }
  }
}

absl::StatusOr<ImageProbe> ProbeWebp(std::span<const uint8_t> b) {
  ImageProbe p;
  p.format = "WebP";
  p.frame_bytes_per_pixel = 4;  // lossless: BGRA; lossy: YUV 4:2:0 (+ alpha) is less
  if (b.size() < 12) return Truncated("WebP", "no complete RIFF header");
  const uint64_t riff = Le32(b.data() + 4);
  if (riff + 8 > b.size()) {
    return Truncated("WebP", absl::StrFormat("the RIFF header claims %d bytes, the file has %d",
                                             riff + 8, b.size()));
  }
  if (riff < 4 + 8 + 10 || (riff & 1) != 0) {
    return Corrupt("WebP", absl::StrFormat("RIFF size %d", riff));
  }
  const uint8_t* c = b.data() + 12;
  const uint64_t chunk = Le32(c + 4);
  if (12 + 8 + chunk > riff + 8) {
    return Corrupt(
        "WebP", absl::StrFormat("first chunk of %d bytes outside the RIFF size %d", chunk, riff));
  }
  const uint8_t* d = c + 8;
  if (std::memcmp(c, "VP8 ", 4) == 0) {
    if (chunk < 10 || d[3] != 0x9D || d[4] != 0x01 || d[5] != 0x2A) {
      return Corrupt("WebP", "no VP8 key frame");
    }
    p.width = Le16(d + 6) & 0x3FFF;
    p.height = Le16(d + 8) & 0x3FFF;
  } else if (std::memcmp(c, "VP8L", 4) == 0) {
    if (chunk < 5 || d[0] != 0x2F) return Corrupt("WebP", "no VP8L signature");
    const uint32_t v = Le32(d + 1);
    p.width = static_cast<int>(v & 0x3FFF) + 1;
    p.height = static_cast<int>((v >> 14) & 0x3FFF) + 1;
  } else if (std::memcmp(c, "VP8X", 4) == 0) {
    if (chunk < 10) return Corrupt("WebP", "VP8X chunk too short");
    p.width = static_cast<int>(d[4] | (d[5] << 8) | (d[6] << 16)) + 1;
    p.height = static_cast<int>(d[7] | (d[8] << 8) | (d[9] << 16)) + 1;
  } else {
    return Corrupt("WebP", "the first chunk is not VP8, VP8L or VP8X");
  }
  if (p.width == 0 || p.height == 0) {
    return Corrupt("WebP", absl::StrFormat("dimensions %dx%d", p.width, p.height));
  }
  return p;
}

absl::StatusOr<ImageProbe> ProbeBmp(std::span<const uint8_t> b) {
  ImageProbe p;
  p.format = "BMP";
  p.frame_bytes_per_pixel = 4;
  if (b.size() < 26) return Truncated("BMP", "no complete header");
  const uint32_t offset = Le32(b.data() + 10);
  const uint32_t header = Le32(b.data() + 14);
  int64_t w = 0, h = 0;
  uint32_t bpp = 0, compression = 0;
  if (header == 12) {
    w = Le16(b.data() + 18);
    h = Le16(b.data() + 20);
    bpp = Le16(b.data() + 24);
  } else if (header >= 16 && header <= 1024) {
    if (b.size() < 14 + 20) return Truncated("BMP", "no complete header");
    w = static_cast<int32_t>(Le32(b.data() + 18));
    h = static_cast<int32_t>(Le32(b.data() + 22));
    bpp = Le16(b.data() + 28);
    compression = b.size() >= 34 ? Le32(b.data() + 30) : 0;
  } else {
    return Corrupt("BMP", absl::StrFormat("header size %d", header));
  }
  if (h < 0) h = -h;
  if (w <= 0 || h <= 0 || w > 0x7FFFFFFF || h > 0x7FFFFFFF) {
    return Corrupt("BMP", absl::StrFormat("dimensions %dx%d", w, h));
  }
  p.width = static_cast<int>(w);
  p.height = static_cast<int>(h);
  // An uncompressed (or bit-field) bitmap's rows are all there.
  if ((compression == 0 || compression == 3) && bpp > 0 && bpp <= 32) {
    const uint64_t row = (static_cast<uint64_t>(w) * bpp + 31) / 32 * 4;
    const uint64_t need = offset + row * static_cast<uint64_t>(h);
    if (need > b.size()) {
      return Truncated("BMP", absl::StrFormat("%dx%d at %d bits needs %d bytes, the file has %d", w,
                                              h, bpp, need, b.size()));
    }
  }
  return p;
}

absl::StatusOr<ImageProbe> ProbeTiff(std::span<const uint8_t> b) {
  ImageProbe p;
  p.format = "TIFF";
  const bool le = b[0] == 'I';
  auto u16 = [&](size_t at) -> uint32_t {
    return le ? Le16(b.data() + at) : static_cast<uint32_t>((b[at] << 8) | b[at + 1]);
  };
  auto u32 = [&](size_t at) -> uint32_t { return le ? Le32(b.data() + at) : Be32(b.data() + at); };
  if (b.size() < 8) return Truncated("TIFF", "no complete header");
  const uint64_t ifd = u32(4);
  if (ifd + 2 > b.size()) return Truncated("TIFF", "the first IFD lies past the end");
  const uint32_t entries = u16(ifd);
  if (ifd + 2 + 12ull * entries > b.size()) return Truncated("TIFF", "the first IFD is cut short");
  int64_t w = 0, h = 0;
  uint32_t samples = 1, bits = 8;
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    const uint32_t tag = u16(e), type = u16(e + 2);
    const uint32_t value = type == 3 ? u16(e + 8) : u32(e + 8);  // SHORT or LONG
    if (tag == 256) w = value;
    if (tag == 257) h = value;
    if (tag == 258 && type == 3) bits = u16(e + 8);  // the first sample's bits
    if (tag == 277) samples = value;
  }
  if (w <= 0 || h <= 0) return Corrupt("TIFF", absl::StrFormat("dimensions %dx%d", w, h));
  if (w > 0x7FFFFFFF || h > 0x7FFFFFFF) {
    return Corrupt("TIFF", absl::StrFormat("dimensions %dx%d", w, h));
  }
  p.width = static_cast<int>(w);
  p.height = static_cast<int>(h);
  p.frame_bytes_per_pixel =
      static_cast<int>(std::clamp<uint32_t>(samples, 1, 4) * (bits > 8 ? 2 : 1));
  p.frame_bytes_per_pixel = std::max(p.frame_bytes_per_pixel, 4);
  return p;
}

}  // namespace

bool IsFfmpegImageFormat(const char* format) {
  for (const char* f : {"PNG", "GIF", "WebP", "BMP", "TIFF"}) {
    if (std::strcmp(format, f) == 0) return true;
  }
  return false;
}

absl::StatusOr<ImageProbe> ProbeImage(std::span<const uint8_t> bytes, const char* format) {
  if (std::strcmp(format, "PNG") == 0) return ProbePng(bytes);
  if (std::strcmp(format, "GIF") == 0) return ProbeGif(bytes);
  if (std::strcmp(format, "WebP") == 0) return ProbeWebp(bytes);
  if (std::strcmp(format, "BMP") == 0) return ProbeBmp(bytes);
  if (std::strcmp(format, "TIFF") == 0) return ProbeTiff(bytes);
  return absl::InvalidArgumentError(absl::StrCat("no probe for ", format));
}

absl::Status CheckPngInflate(std::span<const uint8_t> bytes, const ImageProbe& probe,
                             int64_t cpu_deadline_ns, double max_cpu_seconds) {
  // Deflate expands at most 1032:1, so the compressed size bounds what
  // FFmpeg's inflate can be made to do. No second pass when that bound is
  // small: the stream cannot inflate to much more than the image, or it
  // cannot keep FFmpeg's inflate busy for longer than the CPU budget (at
  // the slowest inflate rate measured, on maximally compressed zeros), which
  // the decoder then reports as exceeded. Typical photos (compressed size
  // under ~0.5 MB with the default 2 s budget) thus inflate once.
  const uint64_t raw = probe.png_raw_bytes;
  const uint64_t allowed = raw + raw / 16 + 65536;
  const uint64_t most = probe.png_idat_bytes * kDeflateMaxRatio;
  if (most <= 4 * allowed) return absl::OkStatus();
  if (max_cpu_seconds > 0 &&
      static_cast<double>(most) / kSlowestInflateBytesPerSecond <= max_cpu_seconds) {
    return absl::OkStatus();
  }
  z_stream z;
  std::memset(&z, 0, sizeof(z));
  if (inflateInit(&z) != Z_OK) return absl::ResourceExhaustedError("zlib: inflateInit failed");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  uint8_t window[64 * 1024];
  uint64_t produced = 0;
  bool done = false;
  absl::Status verdict = absl::OkStatus();
  absl::Status walked =
      WalkPngChunks(bytes, [&](const uint8_t* type, const uint8_t* data, uint32_t length) {
        if (done || std::memcmp(type, "IDAT", 4) != 0) return;
        z.next_in = const_cast<uint8_t*>(data);
        z.avail_in = length;
        while (z.avail_in > 0 && !done) {
          z.next_out = window;
          z.avail_out = sizeof(window);
          const int rc = inflate(&z, Z_NO_FLUSH);
          produced += sizeof(window) - z.avail_out;
          if (produced > allowed) {
            verdict = absl::InvalidArgumentError(absl::StrFormat(
                "PNG %dx%d: the IDAT stream inflates to more than the image's %d bytes (a "
                "decompression bomb)",
                probe.width, probe.height, raw));
            done = true;
          } else if (rc != Z_OK) {
            done = true;  // end of stream, or corrupt data: the decoder reports it
          } else if (cpu_deadline_ns != 0 && ThreadCpuNs() > cpu_deadline_ns) {
            verdict = absl::ResourceExhaustedError(absl::StrFormat(
                "decoding took more than max_decode_seconds (%g s of CPU; PNG IDAT stream)",
                max_cpu_seconds));
            done = true;
          }
        }
      });
  if (!walked.ok()) return walked;
  return verdict;
}

}  // namespace conveyor
