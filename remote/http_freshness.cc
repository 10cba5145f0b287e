#include "remote/http_freshness.h"

#include <algorithm>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conveyor::remote {

namespace {

constexpr uint64_t kMaxFreshSeconds = 365ull * 24 * 3600;

// A delta-seconds value (digits only; a quoted one is accepted, as caches
// commonly do); nullopt when malformed. Values past the cap are the cap.
std::optional<uint64_t> DeltaSeconds(absl::string_view v) {
  v = absl::StripAsciiWhitespace(v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  if (v.empty() || !std::all_of(v.begin(), v.end(), absl::ascii_isdigit)) return std::nullopt;
  if (v.size() > 12) return kMaxFreshSeconds;
  uint64_t n = 0;
  if (!absl::SimpleAtoi(v, &n)) return std::nullopt;
  return std::min(n, kMaxFreshSeconds);
}

}  // namespace

uint64_t FreshSeconds(std::string_view cache_control_text, std::string_view age_text) {
  // (Debian's abseil has a string_view of its own.)
  const absl::string_view cache_control(cache_control_text.data(), cache_control_text.size());
  const absl::string_view age(age_text.data(), age_text.size());
  std::optional<uint64_t> max_age, s_maxage;
  for (absl::string_view d : absl::StrSplit(cache_control, ',')) {
    d = absl::StripAsciiWhitespace(d);
    const size_t eq = d.find('=');
    const absl::string_view name = absl::StripAsciiWhitespace(d.substr(0, eq));
    const absl::string_view value = eq == absl::string_view::npos ? "" : d.substr(eq + 1);
    if (absl::EqualsIgnoreCase(name, "no-cache") || absl::EqualsIgnoreCase(name, "no-store")) {
      return 0;
    }
    const bool is_max_age = absl::EqualsIgnoreCase(name, "max-age");
    const bool is_s_maxage = absl::EqualsIgnoreCase(name, "s-maxage");
    if (!is_max_age && !is_s_maxage) continue;
    const std::optional<uint64_t> n = DeltaSeconds(value);
    if (!n.has_value()) return 0;  // a malformed lifetime: not fresh
    (is_s_maxage ? s_maxage : max_age) = *n;
  }
  const std::optional<uint64_t> lifetime = s_maxage.has_value() ? s_maxage : max_age;
  if (!lifetime.has_value()) return 0;
  uint64_t current_age = 0;
  if (!absl::StripAsciiWhitespace(age).empty()) {
    const std::optional<uint64_t> a = DeltaSeconds(age);
    if (!a.has_value()) return 0;
    current_age = *a;
  }
  return *lifetime > current_age ? *lifetime - current_age : 0;
}

}  // namespace conveyor::remote
