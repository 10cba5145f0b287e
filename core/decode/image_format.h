// ImageFormatName: what a file looks like by its first bytes ("magic"), so a
// sample that is not a JPEG can be refused with a reason that names its
// format instead of echoing file content. Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <span>

namespace conveyor {

// "JPEG", "PNG", "GIF", "WebP", "BMP", "TIFF", "PNM (PPM/PGM/PBM)",
// "AVIF/HEIF", "JPEG 2000", "JPEG XL", "ICO", "PDF", "ZIP", "gzip", or
// "unknown format". A static string; never built from the bytes.
const char* ImageFormatName(std::span<const uint8_t> bytes);

}  // namespace conveyor
