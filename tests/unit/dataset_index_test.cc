// Tests of the dataset index (core/data/dataset_index.h): ImageFolder trees and
// list files built in a temporary directory.
#include "core/data/dataset_index.h"
#include "absl/strings/str_cat.h"
#include "core/data/list_columns.h"
#include "tests/unit/temp_dir.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace conveyor {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST_CASE("ImageFolder: labels from sorted class names files sorted", "[dataset]") {
  TempDir dir;
  dir.Write("zebra/b.jpg");
  dir.Write("zebra/a.JPEG");
  dir.Write("ant/2.png");
  dir.Write("ant/10.jpeg");
  dir.Write("Bee/x.JpG");
  auto index = DatasetIndex::LoadImageFolder(dir.path() + "/");
  REQUIRE(index.ok());
  const DatasetIndex& d = **index;
  REQUIRE(d.class_names() == std::vector<std::string>{"Bee", "ant", "zebra"});  // byte order
  REQUIRE(d.num_classes() == 3);
  REQUIRE(d.size() == 5);
  CHECK(d.root() == dir.path());
  const std::vector<std::pair<std::string, int>> expected = {{"Bee/x.JpG", 0},
                                                             {"ant/10.jpeg", 1},
                                                             {"ant/2.png", 1},
                                                             {"zebra/a.JPEG", 2},
                                                             {"zebra/b.jpg", 2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    CHECK(d.relative_path(i) == expected[i].first);
    CHECK(d.label(i) == expected[i].second);
  }
  CHECK(d.FullPath(0) == dir.path() + "/Bee/x.JpG");
}

TEST_CASE("ImageFolder: skips non-images hidden files nested folders stray files", "[dataset]") {
  TempDir dir;
  dir.Write("cat/ok.jpg");
  dir.Write("cat/notes.txt");
  dir.Write("cat/noext");
  dir.Write("cat/.hidden.jpg");
  dir.Write("cat/nested/deep.jpg");
  dir.Write(".hiddenclass/a.jpg");
  dir.Write("readme.jpg");  // file directly under root: not a class
  fs::create_symlink(dir.path() + "/cat/ok.jpg", dir.path() + "/cat/link.jpg");
  fs::create_symlink(dir.path() + "/missing.jpg", dir.path() + "/cat/dangling.jpg");
  auto index = DatasetIndex::LoadImageFolder(dir.path());
  REQUIRE(index.ok());
  const DatasetIndex& d = **index;
  REQUIRE(d.class_names() == std::vector<std::string>{"cat"});
  // Links are indexed without being followed (reading them is refused, see
  // hostile_files_test.cc), dangling ones too.
  REQUIRE(d.size() == 3);
  CHECK(d.relative_path(0) == "cat/dangling.jpg");
  CHECK(d.relative_path(1) == "cat/link.jpg");
  CHECK(d.relative_path(2) == "cat/ok.jpg");
}

TEST_CASE("ImageFolder: what is left out is counted by reason with escaped examples", "[dataset]") {
  TempDir dir;
  dir.Write("cat/ok.jpg");
  dir.Write("cat/notes.txt");
  dir.Write("cat/noext");
  dir.Write("cat/evil\nname\x1b[2J.csv");
  dir.Write("cat/more.json");
  dir.Write("cat/.hidden.jpg");
  dir.Write("cat/nested/deep.jpg");
  dir.Write("cat/folder.jpg/inner.jpg");
  dir.Write(".hiddenclass/a.jpg");
  dir.Write("readme.jpg");
  fs::create_symlink(dir.path() + "/cat", dir.path() + "/linked_class");
  auto index = DatasetIndex::LoadImageFolder(dir.path());
  REQUIRE(index.ok());
  const IgnoredEntries& ig = (*index)->ignored();
  CHECK(ig.counts[IgnoredEntries::kNoImageExtension] == 4);
  CHECK(ig.counts[IgnoredEntries::kHidden] == 2);
  CHECK(ig.counts[IgnoredEntries::kNestedFolder] == 2);
  CHECK(ig.counts[IgnoredEntries::kNotAFolderAtRoot] == 2);
  CHECK(ig.total() == 10);
  // At most kMaxExamples names per reason, escaped; "..." says there are more.
  CHECK(ig.examples[IgnoredEntries::kNoImageExtension].size() == IgnoredEntries::kMaxExamples);
  const std::string summary = ig.Summary();
  INFO(summary);
  CHECK(summary.find("10 entries ignored: ") == 0);
  CHECK(summary.find("4 without an image extension (e.g. 'cat/") != std::string::npos);
  CHECK(summary.find(", ...); 2 directly under the root but not a folder (files, links, special "
                     "files) (e.g. '") != std::string::npos);
  CHECK(summary.find("'linked_class'") != std::string::npos);
  CHECK(summary.find("'readme.jpg'") != std::string::npos);
  CHECK(summary.find("2 hidden (name starts with '.') (e.g. '") != std::string::npos);
  CHECK(summary.find("2 folders inside class folders (not descended into)") != std::string::npos);
  CHECK(summary.find('\n') == std::string::npos);
  CHECK(summary.find('\x1b') == std::string::npos);
  // A clean tree has nothing to say; list files never ignore an entry.
  TempDir clean;
  clean.Write("a/1.jpg");
  auto clean_index = DatasetIndex::LoadImageFolder(clean.path());
  REQUIRE(clean_index.ok());
  CHECK((*clean_index)->ignored().total() == 0);
  CHECK((*clean_index)->ignored().Summary().empty());
}

TEST_CASE("ImageFolder: an empty class keeps its label", "[dataset]") {
  TempDir dir;
  dir.Write("a/1.jpg");
  dir.MakeDir("b");
  dir.Write("c/1.jpg");
  auto index = DatasetIndex::LoadImageFolder(dir.path());
  REQUIRE(index.ok());
  CHECK((*index)->num_classes() == 3);
  REQUIRE((*index)->size() == 2);
  CHECK((*index)->label(0) == 0);
  CHECK((*index)->label(1) == 2);
}

TEST_CASE("ImageFolder: errors name the path", "[dataset]") {
  TempDir dir;
  SECTION("missing root") {
    auto index = DatasetIndex::LoadImageFolder(dir.path() + "/nope");
    REQUIRE(index.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(Message(index.status()), Catch::Contains(dir.path() + "/nope"));
  }
  SECTION("root is a file") {
    const std::string file = dir.Write("file.jpg");
    auto index = DatasetIndex::LoadImageFolder(file);
    REQUIRE(index.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(index.status()), Catch::Contains(file));
  }
  SECTION("no class folders") {
    dir.Write("stray.jpg");
    auto index = DatasetIndex::LoadImageFolder(dir.path());
    REQUIRE(index.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(Message(index.status()), Catch::Contains("no class folders"));
    CHECK_THAT(Message(index.status()), Catch::Contains(dir.path()));
  }
  SECTION("no images") {
    dir.Write("a/readme.txt");
    dir.MakeDir("b");
    auto index = DatasetIndex::LoadImageFolder(dir.path());
    REQUIRE(index.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(Message(index.status()), Catch::Contains("no image files"));
    CHECK_THAT(Message(index.status()), Catch::Contains(dir.path()));
  }
}

TEST_CASE("HasImageExtension is case-insensitive", "[dataset]") {
  CHECK(HasImageExtension("a.jpg"));
  CHECK(HasImageExtension("a.JPEG"));
  CHECK(HasImageExtension("a.b.Png"));
  CHECK(HasImageExtension("x.webp"));
  CHECK_FALSE(HasImageExtension("a.jpg.txt"));
  CHECK_FALSE(HasImageExtension("jpg"));
  CHECK_FALSE(HasImageExtension("a.jp"));
}

TEST_CASE("List file: good file with comments blank lines CRLF", "[dataset]") {
  TempDir dir;
  const std::string list = dir.Write("train.txt",
                                     "# header comment\n"
                                     "n01/a b.JPEG\t3\n"
                                     "\n"
                                     "   \t \n"
                                     "n02/c.jpg\t0\r\n"
                                     "#n03/skipped.jpg\t1\n"
                                     "n02/sub/d.jpg\t12");  // no final newline
  auto index = DatasetIndex::LoadListFile(list);
  REQUIRE(index.ok());
  const DatasetIndex& d = **index;
  REQUIRE(d.size() == 3);
  CHECK(d.root() == dir.path());  // default root: the list file's directory
  CHECK(d.relative_path(0) == "n01/a b.JPEG");
  CHECK(d.label(0) == 3);
  CHECK(d.relative_path(1) == "n02/c.jpg");
  CHECK(d.label(1) == 0);
  CHECK(d.relative_path(2) == "n02/sub/d.jpg");
  CHECK(d.label(2) == 12);
  CHECK(d.num_classes() == 13);
  CHECK(d.class_names().empty());
  CHECK(d.FullPath(1) == dir.path() + "/n02/c.jpg");
}

TEST_CASE("List file: explicit root", "[dataset]") {
  TempDir dir;
  dir.MakeDir("images");
  const std::string list = dir.Write("lists/val.txt", "x.jpg\t1\n");
  auto index = DatasetIndex::LoadListFile(list, dir.path() + "/images");
  REQUIRE(index.ok());
  CHECK((*index)->FullPath(0) == dir.path() + "/images/x.jpg");
  auto missing = DatasetIndex::LoadListFile(list, dir.path() + "/nope");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("List file: bad lines give file:line and the reason", "[dataset]") {
  TempDir dir;
  struct Case {
    std::string line;
    std::string reason;
  };
  const std::vector<Case> cases = {
      {"a.jpg 3", "missing tab"},
      {"a.jpg\t-1", "non-negative integer"},
      {"a.jpg\tcat", "non-negative integer"},
      {"a.jpg\t", "non-negative integer"},
      {"a.jpg\t1\textra", "non-negative integer"},
      {"a.jpg\t99999999999", "non-negative integer"},
      {"/etc/passwd\t1", "absolute path"},
      {"../secret.jpg\t1", "'..'"},
      {"a/../../b.jpg\t1", "'..'"},
      {"\t1", "empty path"},
  };
  for (const Case& c : cases) {
    INFO(c.line);
    const std::string list = dir.Write("bad.txt", "# comment\nok.jpg\t0\n" + c.line + "\n");
    auto index = DatasetIndex::LoadListFile(list);
    REQUIRE(index.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(Message(index.status()), Catch::Contains(list + ":3: "));
    CHECK_THAT(Message(index.status()), Catch::Contains(c.reason));
  }
}

TEST_CASE("List file: '..' inside a name is fine missing and empty files are errors", "[dataset]") {
  TempDir dir;
  const std::string ok = dir.Write("ok.txt", "a..b/c...jpg\t1\n");
  auto index = DatasetIndex::LoadListFile(ok);
  REQUIRE(index.ok());
  CHECK((*index)->relative_path(0) == "a..b/c...jpg");

  auto missing = DatasetIndex::LoadListFile(dir.path() + "/none.txt");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(Message(missing.status()), Catch::Contains(dir.path() + "/none.txt"));

  const std::string empty = dir.Write("empty.txt", "# nothing\n\n");
  auto none = DatasetIndex::LoadListFile(empty);
  CHECK(none.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(Message(none.status()), Catch::Contains("no entries"));
}

TEST_CASE("FromEntries validates paths and labels", "[dataset]") {
  auto good = DatasetIndex::FromEntries("/data/", {{"a/1.jpg", 1}, {"b/2.jpg", 0}}, {"a", "b"});
  REQUIRE(good.ok());
  CHECK((*good)->FullPath(0) == "/data/a/1.jpg");
  CHECK((*good)->num_classes() == 2);
  CHECK_FALSE(DatasetIndex::FromEntries("/d", {{"a.jpg", -1}}).ok());
  CHECK_FALSE(DatasetIndex::FromEntries("/d", {{"../a.jpg", 0}}).ok());
  CHECK_FALSE(DatasetIndex::FromEntries("/d", {{"a.jpg", 2}}, {"a", "b"}).ok());
  CHECK_FALSE(DatasetIndex::FromEntries("/d", {}).ok());
}

TEST_CASE("List file: an ImageNet-like list round trips and takes ~10 bytes an entry",
          "[dataset]") {
  // Paths like n01440764/n01440764_10026.JPEG (class-sorted, ids random
  // within a class), 100 classes: the paths are front-coded and the labels
  // packed into one byte each (core/data/front_coded_paths.h).
  TempDir dir;
  std::string content;
  std::vector<std::pair<std::string, int32_t>> expected;
  size_t path_bytes = 0;
  const size_t n = 20000;
  uint64_t x = 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int32_t label = static_cast<int32_t>(i * 100 / n);
    const std::string wnid = "n0" + std::to_string(1440764 + label * 7919);
    const std::string path =
        wnid + "/" + wnid + "_" + std::to_string(1 + (x >> 33) % 60000) + ".JPEG";
    path_bytes += path.size();
    content += path + "\t" + std::to_string(label) + "\n";
    expected.emplace_back(path, label);
  }
  const std::string list = dir.Write("big.txt", content);
  auto index = DatasetIndex::LoadListFile(list);
  REQUIRE(index.ok());
  REQUIRE((*index)->size() == n);
  for (size_t i = 0; i < n; ++i) {
    INFO("entry " << i);
    REQUIRE((*index)->relative_path(i) == expected[i].first);
    REQUIRE((*index)->label(i) == expected[i].second);
  }
  const size_t bytes = (*index)->MemoryBytes();
  INFO("path bytes " << path_bytes << ", MemoryBytes " << bytes);
  CHECK(bytes <= n * 12);  // the plain form took path_bytes + 12 B an entry
  CHECK(bytes * 2 <= path_bytes);
}

TEST_CASE("FromEntries: odd bytes in names and labels of every width round trip", "[dataset]") {
  const std::vector<DatasetIndex::Entry> entries = {
      {"new\nline/tab\there.jpg", 0},
      {"new\nline/tab\there.jpeg", 255},
      {"\xff\xfe/\x80\x81.jpg", 256},
      {"\xc3\xa9t\xc3\xa9/\r.jpg", 65535},
      {"\xc3\xa9t\xc3\xa9/\r\r.jpg", 65536},
      {"a/..b/c..", 2147483647},
      {"a/.../c", 7},
  };
  auto index = DatasetIndex::FromEntries("/nonexistent-root", entries);
  REQUIRE(index.ok());
  REQUIRE((*index)->size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    INFO("entry " << i);
    CHECK((*index)->relative_path(i) == entries[i].relative_path);
    CHECK((*index)->label(i) == entries[i].label);
  }
  CHECK((*index)->num_classes() == 2147483648ull);
  // Every width: the fewest bytes that hold the largest label.
  for (const int32_t top : {0, 1, 255, 256, 65535, 65536, 2147483647}) {
    INFO("largest label " << top);
    auto one = DatasetIndex::FromEntries("/nonexistent-root", {{"x/a.jpg", top}, {"x/b.jpg", 0}});
    REQUIRE(one.ok());
    CHECK((*one)->label(0) == top);
    CHECK((*one)->label(1) == 0);
  }
}

TEST_CASE("ImageFolder: each media kind lists its own extensions", "[dataset]") {
  TempDir dir;
  dir.Write("c/a.jpg");
  dir.Write("c/b.GIF");
  dir.Write("c/clip.mp4");
  dir.Write("c/clip.WebM");
  dir.Write("c/clip.mkv");
  dir.Write("c/song.flac");
  dir.Write("c/song.m4a");
  dir.Write("c/notes.txt");
  auto paths = [&](MediaKind kind) {
    auto index = DatasetIndex::LoadImageFolder(dir.path(), ExtensionsFor(kind));
    REQUIRE(index.ok());
    std::vector<std::string> out;
    for (size_t i = 0; i < (*index)->size(); ++i) out.emplace_back((*index)->relative_path(i));
    return out;
  };
  CHECK(paths(MediaKind::kImage) == std::vector<std::string>{"c/a.jpg", "c/b.GIF"});
  CHECK(paths(MediaKind::kVideo) ==
        std::vector<std::string>{"c/clip.WebM", "c/clip.mkv", "c/clip.mp4"});
  CHECK(paths(MediaKind::kAudio) == std::vector<std::string>{"c/song.flac", "c/song.m4a"});
  // The default is the image set.
  auto images = DatasetIndex::LoadImageFolder(dir.path());
  REQUIRE(images.ok());
  CHECK((*images)->size() == 2);
  CHECK((*images)->ignored().counts[IgnoredEntries::kNoImageExtension] == 6);
  for (std::string_view e : {".mp4", ".mkv", ".webm", ".mov", ".avi"}) {
    CHECK(HasExtension(absl::StrCat("x", std::string(e)), VideoExtensions()));
  }
  for (std::string_view e : {".wav", ".flac", ".mp3", ".opus", ".ogg", ".m4a", ".aac"}) {
    CHECK(HasExtension(absl::StrCat("x", std::string(e)), AudioExtensions()));
  }
  CHECK_FALSE(HasExtension("x.mp4", ImageExtensions()));
  // A folder of images only has no videos: the message names the set.
  TempDir pics;
  pics.Write("c/a.jpg");
  auto none = DatasetIndex::LoadImageFolder(pics.path(), VideoExtensions());
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(Message(none.status()),
             Catch::Contains("no files with an extension in (.mp4 .mkv .webm .mov .avi)"));
}

TEST_CASE("content digest: names and labels in order, not the root", "[dataset]") {
  auto digest = [](const std::string& root, std::vector<DatasetIndex::Entry> entries) {
    auto index = DatasetIndex::FromEntries(root, entries);
    REQUIRE(index.ok());
    return (*index)->ContentDigest();
  };
  const std::vector<DatasetIndex::Entry> base = {{"a/1.jpg", 0}, {"a/2.jpg", 0}, {"b/1.jpg", 1}};
  const std::string d = digest("/data/one", base);
  CHECK(d.size() == 7 + 64);
  CHECK(d.rfind("sha256:", 0) == 0);
  CHECK(digest("/mnt/elsewhere", base) == d);  // the same dataset mounted elsewhere
  auto changed = base;
  changed[2].label = 2;
  CHECK(digest("/data/one", changed) != d);
  changed = base;
  changed[1].relative_path = "a/3.jpg";
  CHECK(digest("/data/one", changed) != d);
  changed = base;
  std::swap(changed[0], changed[1]);
  CHECK(digest("/data/one", changed) != d);
  changed = base;
  changed.pop_back();
  CHECK(digest("/data/one", changed) != d);
  // A path may not be split differently between entries to collide.
  CHECK(digest("/r", {{"ab", 0}, {"c", 0}}) != digest("/r", {{"a", 0}, {"bc", 0}}));
}

TEST_CASE("List file: extra columns are kept for the fields that read them", "[dataset][fields]") {
  TempDir dir;
  const std::string list = dir.Write("list.txt",
                                     "a.jpg\t1\ta cat\t{\"w\": 3}\n"
                                     "b.jpg\t2\n"
                                     "# comment\n"
                                     "c.jpg\t0\t\tlast\r\n");
  ListColumns columns({3, 2, 7});
  auto index = DatasetIndex::LoadListFile(list, "", &columns);
  REQUIRE(index.ok());
  REQUIRE((*index)->size() == 3);
  CHECK((*index)->label(0) == 1);
  CHECK((*index)->label(2) == 0);
  CHECK(columns.size() == 3);
  CHECK(columns.Value(0, 2) == std::optional<std::string_view>("a cat"));
  CHECK(columns.Value(0, 3) == std::optional<std::string_view>("{\"w\": 3}"));
  CHECK_FALSE(columns.Value(1, 2).has_value());  // a line without it
  CHECK(columns.Value(2, 2) == std::optional<std::string_view>(""));
  CHECK(columns.Value(2, 3) == std::optional<std::string_view>("last"));
  CHECK_FALSE(columns.Value(0, 7).has_value());
  CHECK_FALSE(columns.Value(0, 4).has_value());  // not asked for

  ListFileParts parts(*index, std::make_shared<ListColumns>(std::move(columns)));
  const auto caption = parts.Member(0, ColumnMember(2), {});
  REQUIRE(caption.has_value());
  CHECK(std::string(reinterpret_cast<const char*>(caption->data()), caption->size()) == "a cat");
  CHECK_FALSE(parts.Member(0, "txt", {}).has_value());
  std::string key;
  parts.Key(2, &key);
  CHECK(key == "c.jpg");
  CHECK(ColumnOfMember("#12") == std::optional<uint32_t>(12));
  CHECK_FALSE(ColumnOfMember("#").has_value());
  CHECK_FALSE(ColumnOfMember("#1x").has_value());

  // Without columns asked for, a column after the label is an error, as before.
  auto strict = DatasetIndex::LoadListFile(list);
  REQUIRE_FALSE(strict.ok());
  CHECK(std::string(strict.status().message()).find("list.txt:1: label") != std::string::npos);
}

}  // namespace
}  // namespace conveyor
