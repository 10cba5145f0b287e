#include "core/data/list_columns.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"

namespace conveyor {

std::string ColumnMember(uint32_t column) { return absl::StrCat("#", column); }

std::optional<uint32_t> ColumnOfMember(std::string_view member) {
  if (member.size() < 2 || member.front() != '#') return std::nullopt;
  uint32_t column = 0;
  const char* end = member.data() + member.size();
  auto [p, ec] = std::from_chars(member.data() + 1, end, column);
  if (ec != std::errc() || p != end) return std::nullopt;
  return column;
}

void ListColumns::AddLine(std::string_view rest) {
  // rest: "" or "\tcol2\tcol3...".
  std::vector<std::string_view> columns;  // columns[k]: column k + 2
  while (!rest.empty() && rest.front() == '\t') {
    rest.remove_prefix(1);
    const size_t tab = rest.find('\t');
    columns.push_back(rest.substr(0, tab));
    rest = tab == std::string_view::npos ? std::string_view() : rest.substr(tab);
  }
  for (uint32_t c : wanted_) {
    starts_.push_back(bytes_.size());
    const bool present = c >= 2 && c - 2 < columns.size();
    if (present) bytes_.append(columns[c - 2]);
    present_.push_back(present ? 1 : 0);
  }
}

std::optional<std::string_view> ListColumns::Value(uint64_t index, uint32_t column) const {
  const auto it = std::find(wanted_.begin(), wanted_.end(), column);
  if (it == wanted_.end()) return std::nullopt;
  const size_t at = index * wanted_.size() + static_cast<size_t>(it - wanted_.begin());
  if (at >= starts_.size() || present_[at] == 0) return std::nullopt;
  const uint64_t end = at + 1 < starts_.size() ? starts_[at + 1] : bytes_.size();
  return std::string_view(bytes_).substr(starts_[at], end - starts_[at]);
}

std::optional<std::span<const uint8_t>> ListFileParts::Member(uint64_t index,
                                                              std::string_view member,
                                                              std::span<const uint8_t>) const {
  const std::optional<uint32_t> column = ColumnOfMember(member);
  if (!column.has_value() || columns_ == nullptr) return std::nullopt;
  const std::optional<std::string_view> v = columns_->Value(index, *column);
  if (!v.has_value()) return std::nullopt;
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v->data()), v->size());
}

void ListFileParts::Key(uint64_t index, std::string* out) const {
  *out = names_->relative_path(index);
}

}  // namespace conveyor
