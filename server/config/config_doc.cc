#include "server/config/config_doc.h"

#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// Cells of a table row "| a | b \| c | d |": split at '|' not preceded by a
// backslash, trimmed.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|' && line[i - 1] != '\\') {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return cells;
}

}  // namespace

std::vector<FieldDoc> DaemonFieldDocs() { return DaemonDocs(); }
std::vector<FieldDoc> PipelineFieldDocs() { return PipelineDocs(); }

std::string FieldTableMarkdown(const std::vector<FieldDoc>& rows) {
  std::string out = "| field | type | default | meaning |\n|---|---|---|---|\n";
  for (const FieldDoc& r : rows) {
    absl::StrAppend(&out, "| `", r.field, "` | ", r.type, " | ", r.default_value, " | ", r.doc,
                    " |\n");
  }
  return out;
}

std::string ConfigSchemaMarkdown() {
  return absl::StrCat(kDaemonFieldsHeading, "\n\n", FieldTableMarkdown(DaemonFieldDocs()), "\n",
                      kPipelineFieldsHeading, "\n\n", FieldTableMarkdown(PipelineFieldDocs()));
}

std::vector<FieldDoc> ParseFieldTable(const std::string& markdown, const std::string& heading) {
  std::vector<FieldDoc> rows;
  std::istringstream in(markdown);
  std::string line;
  bool after_heading = false;
  bool in_table = false;
  while (std::getline(in, line)) {
    if (!after_heading) {
      after_heading = line == heading;
      continue;
    }
    if (!absl::StartsWith(line, "|")) {
      if (in_table) break;  // the table ended
      continue;
    }
    in_table = true;
    const std::vector<std::string> cells = Cells(line);
    if (cells.size() < 4 || cells[0] == "field" || absl::StartsWith(cells[0], "---")) continue;
    std::string field = cells[0];
    if (field.size() >= 2 && field.front() == '`' && field.back() == '`') {
      field = field.substr(1, field.size() - 2);
    }
    rows.push_back({field, cells[1], cells[2], cells[3]});
  }
  return rows;
}

}  // namespace conveyor::server
