#include "server/config/schema.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace conveyor::server {

std::string FormatUintBound(uint64_t v) {
  if (v >= (uint64_t{1} << 32) && (v & (v - 1)) == 0) {
    int bits = 0;
    while ((uint64_t{1} << bits) != v) ++bits;
    return absl::StrCat("2^", bits);
  }
  return absl::StrCat(v);
}

std::string FormatNumberBound(double v) {
  if (std::abs(v) >= 1e6) {
    const double exponent = std::log10(std::abs(v));
    if (exponent == std::floor(exponent)) {
      return absl::StrCat(v < 0 ? "-" : "", "1e", static_cast<int>(exponent));
    }
  }
  if (v == std::floor(v) && std::abs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  // %g, its exponent without padding: "1e-9", not "1e-09".
  std::string s = absl::StrFormat("%g", v);
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  const int exponent = std::stoi(s.substr(e + 1));
  return absl::StrCat(s.substr(0, e), "e", exponent);
}

std::string FormatSizeBound(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  static constexpr int kShift[] = {40, 30, 20, 10};
  if (bytes == 0) return "0";
  for (int i = 0; i < 4; ++i) {
    const uint64_t unit = uint64_t{1} << kShift[i];
    if (bytes % unit == 0) return absl::StrCat(bytes / unit, kUnits[i]);
  }
  return absl::StrCat(bytes, "B");
}

std::string UintType(uint64_t lo, uint64_t hi) {
  return absl::StrCat("integer ", FormatUintBound(lo), "–", FormatUintBound(hi));
}

std::string NumberType(double lo, double hi) {
  return absl::StrCat("number ", FormatNumberBound(lo), "–", FormatNumberBound(hi));
}

std::string SizeType(uint64_t lo, bool percent) {
  std::string s = lo == 0 ? "size" : absl::StrCat("size ≥ ", FormatSizeBound(lo));
  if (percent) absl::StrAppend(&s, " or `N%`");
  return s;
}

std::string Quoted(const std::string& v) { return v.empty() ? "none" : absl::StrCat("`", v, "`"); }

}  // namespace conveyor::server
