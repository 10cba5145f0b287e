#include "client/cpp/cuda/gpu_uuid.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace conveyor::client {

std::string FormatGpuUuid(const unsigned char bytes[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 0xf]);
  }
  return out;
}

std::string NormalizeGpuUuid(std::string_view uuid) {
  absl::string_view s = absl::StripAsciiWhitespace(absl::string_view(uuid.data(), uuid.size()));
  if (absl::StartsWithIgnoreCase(s, "GPU-")) s.remove_prefix(4);
  return absl::AsciiStrToLower(s);
}

bool SameGpuUuid(std::string_view a, std::string_view b) {
  const std::string na = NormalizeGpuUuid(a);
  return !na.empty() && na == NormalizeGpuUuid(b);
}

}  // namespace conveyor::client
