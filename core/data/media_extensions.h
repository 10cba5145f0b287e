// The file name extensions that make a file a sample in a folder dataset,
// one set per media kind (images, videos, audio clips), in one place. The
// decoders choose by content, never by name: the extension only decides what
// the index lists. Compared case-insensitively.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <span>
#include <string_view>

#include "core/base/media_kind.h"

namespace conveyor {

// config/README.md's table "File extensions" lists these sets; a unit test
// (tests/unit/media_extensions_readme_test.cc) compares the two.
//
// Images: .jpg .jpeg .png .ppm .pgm .bmp .tif .tiff .webp .gif
std::span<const std::string_view> ImageExtensions();
// Videos: .mp4 .mkv .webm .mov .avi
std::span<const std::string_view> VideoExtensions();
// Audio: .wav .flac .mp3 .opus .ogg .m4a .aac
std::span<const std::string_view> AudioExtensions();
// The set of `kind`.
std::span<const std::string_view> ExtensionsFor(MediaKind kind);
// Tar shards: the extensions a sample's image member may have, by
// preference (a sample with several uses the first): .jpg .jpeg .png .webp
// .ppm .pgm .bmp .tif .tiff .gif — the image set in another order.
std::span<const std::string_view> TarImageExtensions();

// Whether `file_name` ends in one of `extensions` (case-insensitive; the
// extension is from the last '.').
bool HasExtension(std::string_view file_name, std::span<const std::string_view> extensions);

}  // namespace conveyor
