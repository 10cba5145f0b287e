#include "core/decode/image_format.h"

#include <cstring>

namespace conveyor {

namespace {

bool StartsWith(std::span<const uint8_t> b, const char* magic, size_t n, size_t at = 0) {
  return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
}

}  // namespace

const char* ImageFormatName(std::span<const uint8_t> b) {
  if (StartsWith(b, "\xFF\xD8\xFF", 3)) return "JPEG";
  if (StartsWith(b, "\x89PNG\r\n\x1A\n", 8)) return "PNG";
  if (StartsWith(b, "GIF87a", 6) || StartsWith(b, "GIF89a", 6)) return "GIF";
  if (StartsWith(b, "RIFF", 4) && StartsWith(b, "WEBP", 4, 8)) return "WebP";
  if (StartsWith(b, "BM", 2) && b.size() >= 6) return "BMP";
  if (StartsWith(b, "II*\0", 4) || StartsWith(b, "MM\0*", 4)) return "TIFF";
  if (b.size() >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7' &&
      (b[2] == '\n' || b[2] == '\r' || b[2] == ' ' || b[2] == '\t')) {
    return "PNM (PPM/PGM/PBM)";
  }
  if (StartsWith(b, "ftyp", 4, 4)) {
    if (StartsWith(b, "avif", 4, 8) || StartsWith(b, "avis", 4, 8) || StartsWith(b, "heic", 4, 8) ||
        StartsWith(b, "heix", 4, 8) || StartsWith(b, "mif1", 4, 8) || StartsWith(b, "msf1", 4, 8)) {
      return "AVIF/HEIF";
    }
  }
  if (StartsWith(b, "\0\0\0\x0CjP  \r\n\x87\n", 12) || StartsWith(b, "\xFF\x4F\xFF\x51", 4)) {
    return "JPEG 2000";
  }
  if (StartsWith(b, "\xFF\x0A", 2) || StartsWith(b, "\0\0\0\x0CJXL \r\n\x87\n", 12)) {
    return "JPEG XL";
  }
  if (StartsWith(b, "\0\0\1\0", 4) && b.size() >= 6) return "ICO";
  if (StartsWith(b, "%PDF-", 5)) return "PDF";
  if (StartsWith(b, "PK\x03\x04", 4)) return "ZIP";
  if (StartsWith(b, "\x1F\x8B", 2)) return "gzip";
  return "unknown format";
}

}  // namespace conveyor
