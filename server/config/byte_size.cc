#include "server/config/byte_size.h"

#include <cmath>
#include <map>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace conveyor::server {
namespace {

// `percent_of` set: "N%" is allowed and means N percent of it.
absl::StatusOr<uint64_t> Parse(const std::string& text, std::optional<uint64_t> percent_of) {
  const std::string s(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (absl::ascii_isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                          s[i] == '-' || s[i] == '+')) {
    ++i;
  }
  const std::string number = s.substr(0, i);
  const std::string unit(absl::StripAsciiWhitespace(s.substr(i)));
  double v = 0;
  if (number.empty() || !absl::SimpleAtod(number, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a size such as 512MiB or 2GiB, got '", text, "'"));
  }
  if (v < 0 || number[0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat("size must not be negative, got '", text, "'"));
  }
  static const std::map<std::string, double> kUnits = {
      {"", 1},         {"b", 1},       {"k", 0x1p10},   {"ki", 0x1p10},  {"kib", 0x1p10},
      {"m", 0x1p20},   {"mi", 0x1p20}, {"mib", 0x1p20}, {"g", 0x1p30},   {"gi", 0x1p30},
      {"gib", 0x1p30}, {"t", 0x1p40},  {"ti", 0x1p40},  {"tib", 0x1p40}, {"kb", 1e3},
      {"mb", 1e6},     {"gb", 1e9},    {"tb", 1e12}};
  double bytes = 0;
  if (unit == "%") {
    if (!percent_of.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a percentage is not allowed here: '", text, "'"));
    }
    if (v <= 0 || v > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("percentage must be within (0, 100], got '", text, "'"));
    }
    bytes = static_cast<double>(*percent_of) * v / 100.0;
  } else {
    auto it = kUnits.find(absl::AsciiStrToLower(unit));
    if (it == kUnits.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown unit '", unit, "' in '", text, "' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB",
          percent_of.has_value() ? ", or N%" : "", ")"));
    }
    bytes = v * it->second;
  }
  if (bytes >= 0x1p63) {
    return absl::InvalidArgumentError(absl::StrCat("size '", text, "' is too large"));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text) {
  return Parse(text, std::nullopt);
}

absl::StatusOr<uint64_t> ParseByteSizeOrPercent(const std::string& text, uint64_t whole) {
  return Parse(text, whole);
}

}  // namespace conveyor::server
