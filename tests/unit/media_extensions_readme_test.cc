// Tests that config/README.md's table "File extensions" lists what the code
// accepts (core/data/media_extensions.h): per kind, the extensions a folder
// dataset lists and, for images, a tar sample's image member extensions in
// their order of preference. The README is read from $CONVEYOR_SOURCE_DIR.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/media_kind.h"
#include "core/data/media_extensions.h"
#include "tests/support/config_readme.h"

namespace conveyor {
namespace {

struct Row {
  std::vector<std::string> folder;  // the folder column's extensions
  std::vector<std::string> tar;     // the tar column's ("none": empty)
};

// "`.a .b`" -> {".a", ".b"}; "none" -> {}.
std::vector<std::string> Extensions(std::string cell) {
  absl::string_view text = absl::StripAsciiWhitespace(cell);
  if (text == "none") return {};
  text = absl::StripPrefix(absl::StripSuffix(text, "`"), "`");
  return absl::StrSplit(text, ' ', absl::SkipEmpty());
}

// The rows of the first table after "### File extensions", by kind.
std::map<std::string, Row> ParseTable(const std::string& readme) {
  std::map<std::string, Row> rows;
  std::istringstream in(readme);
  std::string line;
  bool after_heading = false, in_table = false;
  while (std::getline(in, line)) {
    if (!after_heading) {
      after_heading = line == "### File extensions";
      continue;
    }
    if (line.empty() || line[0] != '|') {
      if (in_table) break;
      continue;
    }
    in_table = true;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    // "| a | b | c |" splits into "", a, b, c, "".
    REQUIRE(cells.size() == 5);
    const std::string kind(absl::StripAsciiWhitespace(cells[1]));
    if (kind == "`kind`" || absl::StartsWith(kind, "---")) continue;
    rows[kind] = Row{Extensions(cells[2]), Extensions(cells[3])};
  }
  return rows;
}

std::vector<std::string> Strings(std::span<const std::string_view> list) {
  return std::vector<std::string>(list.begin(), list.end());
}

TEST_CASE("config/README.md's table of file extensions is the code's", "[data][docs]") {
  const std::map<std::string, Row> rows = ParseTable(conveyor::testing::ReadConfigReadme());
  REQUIRE(rows.size() == 3);
  const std::pair<const char*, MediaKind> kinds[] = {{"`image`", MediaKind::kImage},
                                                     {"`video`", MediaKind::kVideo},
                                                     {"`audio`", MediaKind::kAudio}};
  for (const auto& [name, kind] : kinds) {
    INFO("kind " << name);
    const auto it = rows.find(name);
    REQUIRE(it != rows.end());
    CHECK(it->second.folder == Strings(ExtensionsFor(kind)));
    if (kind == MediaKind::kImage) {
      CHECK(it->second.tar == Strings(TarImageExtensions()));
    } else {
      CHECK(it->second.tar.empty());
    }
  }
}

TEST_CASE("a tar sample's image member may have any image extension (gif too)", "[data][tar]") {
  // Every folder image extension is a tar image extension too (one set of
  // images, whatever the dataset's layout).
  std::vector<std::string> folder = Strings(ImageExtensions());
  std::vector<std::string> tar = Strings(TarImageExtensions());
  std::sort(folder.begin(), folder.end());
  std::sort(tar.begin(), tar.end());
  CHECK(folder == tar);
}

}  // namespace
}  // namespace conveyor
