// Tests of the daemon's log formats (server/ops/logging.h): JSON escaping of any
// message, the JSON line's keys, the journal's format, and how stderr is
// recognised as the journal's stream. A real daemon's lines are parsed in
// tests/integration/test_metrics.py.
#ifdef CONVEYOR_HAVE_SERVER

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/unique_fd.h"
#include "server/ops/logging.h"
#include "spdlog/details/log_msg.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

std::string Format(spdlog::formatter& f, spdlog::level::level_enum level, const std::string& text) {
  spdlog::details::log_msg msg("conveyord", level, spdlog::string_view_t(text.data(), text.size()));
  spdlog::memory_buf_t buf;
  f.format(msg, buf);
  return std::string(buf.data(), buf.size());
}

TEST_CASE("logging: JSON strings escape quotes, backslashes and control characters", "[logging]") {
  CHECK(JsonEscape("plain text") == "plain text");
  CHECK(JsonEscape("say \"hi\"") == R"(say \"hi\")");
  CHECK(JsonEscape("C:\\dir") == R"(C:\\dir)");
  CHECK(JsonEscape("a\nb\rc\td") == R"(a\nb\rc\td)");
  CHECK(JsonEscape(std::string("nul\0bell\a", 9)) == R"(nul\u0000bell\u0007)");
  CHECK(JsonEscape("del\x7f") == R"(del\u007f)");
  CHECK(JsonEscape("caf\xc3\xa9 \xe2\x9c\x93") == "caf\xc3\xa9 \xe2\x9c\x93");  // UTF-8 kept
  // Not UTF-8: escaped as text first (core/base/text_escape.h), then for JSON.
  CHECK(JsonEscape("bad \xff\n") == R"(bad \\xff\\n)");
}

TEST_CASE("logging: a JSON line has the stable keys, in order, on one line", "[logging]") {
  JsonLogFormatter f;
  const std::string line = Format(f, spdlog::level::warn, "stream 1 of \"x\"\nnext");
  INFO(line);
  REQUIRE(line.back() == '\n');
  CHECK(line.find('\n') == line.size() - 1);
  CHECK(line.rfind(R"({"ts":")", 0) == 0);
  const size_t ts_end = line.find('"', 7);
  const std::string ts = line.substr(7, ts_end - 7);
  // 2026-11-30T20:15:08.123456Z
  CHECK(ts.size() == 27);
  CHECK(ts[10] == 'T');
  CHECK(ts.back() == 'Z');
  CHECK(line.find(R"(","level":"warning","logger":"conveyord","thread":)") == ts_end);
  CHECK(line.find(R"(,"msg":"stream 1 of \"x\"\nnext"})") != std::string::npos);
  CHECK(f.clone() != nullptr);
}

TEST_CASE("logging: journal lines carry the syslog priority and no timestamp", "[logging]") {
  JournalLogFormatter f;
  CHECK(Format(f, spdlog::level::info, "hello") == "<6>I hello\n");
  CHECK(Format(f, spdlog::level::warn, "careful") == "<4>W careful\n");
  CHECK(Format(f, spdlog::level::err, "broken") == "<3>E broken\n");
  CHECK(Format(f, spdlog::level::debug, "detail") == "<7>D detail\n");
}

TEST_CASE("logging: JOURNAL_STREAM counts only when it names the fd's file", "[logging]") {
  testing::TempDir dir;
  const std::string path = dir.Write("stderr.log", "");
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC));
  REQUIRE(fd.get() >= 0);
  struct stat st;
  REQUIRE(fstat(fd.get(), &st) == 0);
  const std::string mine = absl::StrCat(st.st_dev, ":", st.st_ino);
  CHECK(IsJournalStream(mine.c_str(), fd.get()));
  // Inherited from a parent whose stderr was the journal, ours is not.
  const std::string other = absl::StrCat(st.st_dev, ":", st.st_ino + 1);
  CHECK_FALSE(IsJournalStream(other.c_str(), fd.get()));
  CHECK_FALSE(IsJournalStream(nullptr, fd.get()));
  CHECK_FALSE(IsJournalStream("", fd.get()));
  CHECK_FALSE(IsJournalStream("12", fd.get()));
  CHECK_FALSE(IsJournalStream("a:b", fd.get()));
  CHECK_FALSE(IsJournalStream(mine.c_str(), -1));
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
