#include "core/base/text_escape.h"

#include <string>

#include "catch2/catch.hpp"

namespace conveyor {
namespace {

using namespace std::string_literals;

TEST_CASE("EscapeText keeps valid text, multi-byte characters included", "[text_escape]") {
  for (const std::string s :
       {""s, "class_a/img 001.jpg"s, "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.jpg"s,
        "emoji \xf0\x9f\x98\x80.jpg"s, "edge \xf4\x8f\xbf\xbf \xef\xbf\xbd"s,
        "back\\slash \\x41"s}) {
    INFO(s);
    CHECK(EscapeText(s) == s);
    CHECK(IsValidUtf8(s));
  }
}

TEST_CASE("EscapeText escapes each invalid byte as \\xNN", "[text_escape]") {
  CHECK(EscapeText("bad\xff\xfe.jpg") == "bad\\xff\\xfe.jpg");
  CHECK(EscapeText("\x80stray") == "\\x80stray");                   // lone continuation
  CHECK(EscapeText("\xc3") == "\\xc3");                             // truncated 2-byte
  CHECK(EscapeText("\xe6\x97.jpg") == "\\xe6\\x97.jpg");            // truncated 3-byte
  CHECK(EscapeText("\xf0\x9f\x98") == "\\xf0\\x9f\\x98");           // truncated 4-byte
  CHECK(EscapeText("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(EscapeText("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");           // overlong '/', 3 bytes
  CHECK(EscapeText("\xf0\x80\x80\xaf") == "\\xf0\\x80\\x80\\xaf");  // overlong, 4 bytes
  CHECK(EscapeText("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // surrogate U+D800
  CHECK(EscapeText("\xed\xbf\xbf") == "\\xed\\xbf\\xbf");           // surrogate U+DFFF
  CHECK(EscapeText("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  CHECK(EscapeText("\xf8\x88\x80\x80\x80") == "\\xf8\\x88\\x80\\x80\\x80");  // 5-byte form
  CHECK(EscapeText("\xc3\xa9\xc3") == "\xc3\xa9\\xc3");  // valid kept before a truncated one
}

TEST_CASE("EscapeText escapes control characters so names cannot forge lines", "[text_escape]") {
  CHECK(EscapeText("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(EscapeText("x\n2026-01-01 00:00:00.000 E forged") ==
        "x\\n2026-01-01 00:00:00.000 E forged");
  CHECK(EscapeText("\x1b[31mred") == "\\x1b[31mred");
  CHECK(EscapeText(std::string("nul\0end", 7)) == "nul\\x00end");
  CHECK(EscapeText("del\x7f") == "del\\x7f");
  CHECK(EscapeText("c1 \xc2\x85 nel") == "c1 \\u0085 nel");
  CHECK(EscapeText("ls \xe2\x80\xa8 ps \xe2\x80\xa9") == "ls \\u2028 ps \\u2029");
  CHECK(EscapeText("rlo \xe2\x80\xae gpj.exe") == "rlo \\u202e gpj.exe");
  CHECK(EscapeText("iso \xe2\x81\xa6") == "iso \\u2066");
}

TEST_CASE("EscapeText's result is valid UTF-8 and escaping it again changes nothing",
          "[text_escape]") {
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  all += "\xe2\x80\xa8\xed\xa0\x80\xf0\x9f\x98";
  CHECK_FALSE(IsValidUtf8(all));
  const std::string once = EscapeText(all);
  CHECK(IsValidUtf8(once));
  CHECK(EscapeText(once) == once);
  for (char c : once) CHECK((static_cast<unsigned char>(c) >= 0x20 && c != 0x7f));
}

TEST_CASE("EscapeText caps long strings at a boundary and names their size", "[text_escape]") {
  const std::string big(1 << 20, 'p');
  const std::string capped = EscapeText(big, kClientStringCap);
  CHECK(capped == std::string(kClientStringCap, 'p') + "\xe2\x80\xa6(1048576 bytes)");
  CHECK(EscapeText("short", kClientStringCap) == "short");
  CHECK(EscapeText("abcdef", 6) == "abcdef");
  // Never cut inside an escape or a multi-byte character.
  CHECK(EscapeText("ab\xff", 4) == "ab\xe2\x80\xa6(3 bytes)");
  CHECK(EscapeText("ab\xc3\xa9", 3) == "ab\xe2\x80\xa6(4 bytes)");
  CHECK(IsValidUtf8(EscapeText(std::string(300, '\xff'), kClientStringCap)));
}

}  // namespace
}  // namespace conveyor
