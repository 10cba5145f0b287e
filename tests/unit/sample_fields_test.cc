// Sample fields: the specs' checks, the value checks (size, UTF-8, JSON) and
// the JSON grammar against RFC 8259's edge cases.
#include <catch2/catch.hpp>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/data/sample_fields.h"
#include "tests/unit/field_spec_of.h"

namespace conveyor {
namespace {

bool Json(const std::string& s) { return IsValidJson(s, nullptr); }

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_CASE("JSON: every value RFC 8259 allows is accepted", "[fields]") {
  for (const char* ok :
       {"{}", "[]", "0", "-0", "1.5e-3", "-12.0E+7", "true", "false", "null", "\"\"",
        "\"caf\xc3\xa9 \\u00e9 \\n \\\" \\\\ \\/\"", " {\"a\": [1, {\"b\": null}], \"a\": 2} ",
        "\t[\n1 ,\r2]\n", "1e999", "\"\\ud800\""}) {
    INFO(ok);
    CHECK(Json(ok));
  }
}

TEST_CASE("JSON: what is not JSON is refused, saying why", "[fields]") {
  for (const char* bad :
       {"",           " ",     "{a:1}", "[1,]",  "'a'",     "01",          "1.",        ".5",
        "-",          "1e",    "+1",    "NaN",   "tru",     "nul",         "[1 2]",     "{\"a\" 1}",
        "{\"a\":1,}", "[",     "{",     "\"abc", "\"\\x\"", "\"\\u12g4\"", "\"\\u12\"", "\"a\x01\"",
        "\"\xff\"",   "{} {}", "1 x"}) {
    INFO(bad);
    std::string why;
    CHECK_FALSE(IsValidJson(bad, &why));
    CHECK_FALSE(why.empty());
  }
  CHECK(Json(std::string(128, '[') + std::string(128, ']')));
  std::string why;
  CHECK_FALSE(IsValidJson(std::string(129, '[') + std::string(129, ']'), &why));
  CHECK(why.find("nested deeper") != std::string::npos);
  // Deep enough to overflow a stack without the limit: refused, no crash.
  CHECK_FALSE(Json(std::string(1 << 20, '[')));
}

TEST_CASE("a field value is checked against its type and its max_bytes", "[fields]") {
  SampleFieldSpec text = testing::FieldSpecOf("caption", FieldType::kText, "txt", true, 8);
  CHECK(CheckFieldValue(text, Bytes("a cat")).ok());
  const absl::Status long_text = CheckFieldValue(text, Bytes("a cat on a mat"));
  CHECK(long_text.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(long_text.message()) == "field 'caption': 14 bytes, more than its max_bytes 8");
  const absl::Status not_utf8 = CheckFieldValue(text, Bytes("a\xff"));
  CHECK(std::string(not_utf8.message()).find("not valid UTF-8") != std::string::npos);

  SampleFieldSpec json = testing::FieldSpecOf("meta", FieldType::kJson, "json", true, 64);
  CHECK(CheckFieldValue(json, Bytes("{\"w\": 3}")).ok());
  const absl::Status bad = CheckFieldValue(json, Bytes("{\"w\": 3"));
  CHECK(std::string(bad.message()).rfind("field 'meta': not valid JSON (", 0) == 0);

  SampleFieldSpec raw = testing::FieldSpecOf("raw", FieldType::kBytes, "bin", true, 4);
  CHECK(CheckFieldValue(raw, Bytes(std::string("\0\xff\x01\x02", 4))).ok());
}

TEST_CASE("field specs: names, members and bounds are checked", "[fields]") {
  auto Check = [](std::vector<SampleFieldSpec> f) {
    return std::string(ValidateFieldSpecs(f).message());
  };
  const SampleFieldSpec caption =
      testing::FieldSpecOf("caption", FieldType::kText, "txt", true, 100);
  const SampleFieldSpec key = testing::FieldSpecOf("key", FieldType::kKey, "", true, 256);
  CHECK(ValidateFieldSpecs(std::vector<SampleFieldSpec>{caption, key}).ok());
  CHECK(Check({caption, caption}) == "fields[1] (caption): the name is used twice");
  CHECK(Check({testing::FieldSpecOf("9x", FieldType::kText, "txt", true, 1)}).find("a name is") !=
        std::string::npos);
  CHECK(Check({caption, testing::FieldSpecOf("other", FieldType::kBytes, "txt", true, 1)}) ==
        "fields[1] (other): member 'txt' is read by another field");
  CHECK(Check({testing::FieldSpecOf("k", FieldType::kKey, "txt", true, 1)}) ==
        "fields[0] (k): a `key` field has no member");
  CHECK(Check({testing::FieldSpecOf("t", FieldType::kText, "", true, 1)})
            .find("`member` is required") != std::string::npos);
  CHECK(Check({testing::FieldSpecOf("t", FieldType::kText, "txt", true, 0)})
            .find("max_bytes must be") != std::string::npos);
  std::vector<SampleFieldSpec> many;
  for (size_t i = 0; i <= kMaxSampleFields; ++i) {
    many.push_back(testing::FieldSpecOf(absl::StrCat("f", i), FieldType::kText,
                                        absl::StrCat("m", i), true, 1));
  }
  CHECK(Check(many).find("at most") != std::string::npos);
}

}  // namespace
}  // namespace conveyor
