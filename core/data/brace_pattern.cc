#include "core/data/brace_pattern.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace conveyor {
namespace {

bool ParseDecimal(std::string_view s, uint64_t* v) {
  if (s.empty() || s.size() > 18) return false;
  *v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    *v = *v * 10 + static_cast<uint64_t>(c - '0');
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandBraces(std::string_view pattern,
                                                      size_t max_results) {
  auto error = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern '", std::string(pattern), "': ", std::string(why)));
  };
  // The pattern as literal parts and groups of alternatives.
  std::vector<std::vector<std::string>> parts;
  size_t total = 1;
  size_t i = 0;
  while (i < pattern.size()) {
    const size_t open = pattern.find_first_of("{}", i);
    if (open == std::string_view::npos) {
      parts.push_back({std::string(pattern.substr(i))});
      break;
    }
    if (pattern[open] == '}') return error("'}' without '{'");
    if (open > i) parts.push_back({std::string(pattern.substr(i, open - i))});
    const size_t close = pattern.find_first_of("{}", open + 1);
    if (close == std::string_view::npos || pattern[close] == '{') {
      return error(close == std::string_view::npos ? "'{' without '}'"
                                                   : "nested braces are not supported");
    }
    const std::string_view body = pattern.substr(open + 1, close - open - 1);
    if (body.empty()) return error("empty braces '{}'");
    std::vector<std::string> alternatives;
    if (const size_t dots = body.find(".."); dots != std::string_view::npos) {
      const std::string_view a = body.substr(0, dots), b = body.substr(dots + 2);
      uint64_t lo = 0, hi = 0;
      if (!ParseDecimal(a, &lo) || !ParseDecimal(b, &hi)) {
        return error(
            absl::StrCat("range '{", std::string(body), "}' must be {A..B} with decimal numbers"));
      }
      if (lo > hi) return error(absl::StrCat("range '{", std::string(body), "}' is reversed"));
      if (hi - lo >= max_results) {
        return error(absl::StrCat("expands to more than ", max_results, " names"));
      }
      const int width = a.size() > 1 && a[0] == '0' ? static_cast<int>(a.size()) : 0;
      for (uint64_t v = lo; v <= hi; ++v) alternatives.push_back(absl::StrFormat("%0*d", width, v));
    } else {
      size_t start = 0;
      for (;;) {
        const size_t comma = body.find(',', start);
        alternatives.emplace_back(body.substr(
            start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
        if (comma == std::string_view::npos) break;
        start = comma + 1;
      }
    }
    if (alternatives.size() > max_results / total) {
      return error(absl::StrCat("expands to more than ", max_results, " names"));
    }
    total *= alternatives.size();
    parts.push_back(std::move(alternatives));
    i = close + 1;
  }
  std::vector<std::string> out = {""};
  for (const std::vector<std::string>& part : parts) {
    std::vector<std::string> next;
    next.reserve(out.size() * part.size());
    for (const std::string& prefix : out) {
      for (const std::string& alt : part) next.push_back(prefix + alt);
    }
    out = std::move(next);
  }
  if (out.size() > max_results) {
    return error(absl::StrCat("expands to more than ", max_results, " names"));
  }
  return out;
}

}  // namespace conveyor
