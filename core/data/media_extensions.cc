#include "core/data/media_extensions.h"

#include "absl/strings/match.h"

namespace conveyor {
namespace {
constexpr std::string_view kImage[] = {".jpg", ".jpeg", ".png",  ".ppm",  ".pgm",
                                       ".bmp", ".tif",  ".tiff", ".webp", ".gif"};
constexpr std::string_view kVideo[] = {".mp4", ".mkv", ".webm", ".mov", ".avi"};
constexpr std::string_view kAudio[] = {".wav", ".flac", ".mp3", ".opus", ".ogg", ".m4a", ".aac"};
constexpr std::string_view kTarImage[] = {".jpg", ".jpeg", ".png", ".webp", ".ppm",
                                          ".pgm", ".bmp",  ".tif", ".tiff", ".gif"};
static_assert(std::size(kTarImage) == std::size(kImage), "the image set in another order");
}  // namespace

std::span<const std::string_view> ImageExtensions() { return kImage; }
std::span<const std::string_view> VideoExtensions() { return kVideo; }
std::span<const std::string_view> AudioExtensions() { return kAudio; }

std::span<const std::string_view> TarImageExtensions() { return kTarImage; }

std::span<const std::string_view> ExtensionsFor(MediaKind kind) {
  switch (kind) {
    case MediaKind::kImage: break;
    case MediaKind::kVideo: return kVideo;
    case MediaKind::kAudio: return kAudio;
  }
  return kImage;
}

bool HasExtension(std::string_view file_name, std::span<const std::string_view> extensions) {
  const size_t dot = file_name.find_last_of('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view ext = file_name.substr(dot);
  for (const std::string_view candidate : extensions) {
    if (absl::EqualsIgnoreCase(absl::string_view(ext.data(), ext.size()),
                               absl::string_view(candidate.data(), candidate.size()))) {
      return true;
    }
  }
  return false;
}

}  // namespace conveyor
