// Tests of the config schema declared once (server/config/schema.h,
// server/config/config_doc.h): config/README.md's field tables agree with
// the declarations, unknown keys are refused from the same tables, bounds
// the core owns come from its constants, and documented defaults are those
// the parse gives. Compiled only when the server library is built.
#ifdef CONVEYOR_HAVE_SERVER

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/decode/transform_spec.h"
#include "core/engine/engine.h"
#include "core/engine/pipeline_config.h"
#include "server/config/config.h"
#include "server/config/config_doc.h"
#include "server/config/schema.h"
#include "tests/support/config_readme.h"

namespace conveyor::server {
namespace {

const SystemInfo kMachine{uint64_t{8} << 30, 0};

absl::StatusOr<DaemonConfig> Parse(const std::string& yaml) {
  return ParseConfig(yaml, "schema.yaml", "/etc", kMachine);
}

// `rows` by field, for look-ups.
std::map<std::string, FieldDoc> ByField(const std::vector<FieldDoc>& rows) {
  std::map<std::string, FieldDoc> m;
  for (const FieldDoc& r : rows) m[r.field] = r;
  return m;
}

void ExpectTableMatches(const std::string& readme, const std::string& heading,
                        const std::vector<FieldDoc>& schema) {
  INFO(heading);
  const std::vector<FieldDoc> doc = ParseFieldTable(readme, heading);
  REQUIRE_FALSE(doc.empty());
  // Row by row, so that a failure names the field; then the order.
  const std::map<std::string, FieldDoc> by_doc = ByField(doc);
  for (const FieldDoc& want : schema) {
    INFO("schema field " << want.field << " | " << want.type << " | " << want.default_value);
    const auto it = by_doc.find(want.field);
    REQUIRE(it != by_doc.end());
    CHECK(it->second.type == want.type);
    CHECK(it->second.default_value == want.default_value);
  }
  const std::map<std::string, FieldDoc> by_schema = ByField(schema);
  for (const FieldDoc& got : doc) {
    INFO("README field " << got.field << " is not in the schema");
    CHECK(by_schema.count(got.field) == 1);
  }
  std::vector<std::string> doc_order, schema_order;
  for (const FieldDoc& r : doc) doc_order.push_back(r.field);
  for (const FieldDoc& r : schema) schema_order.push_back(r.field);
  CHECK(doc_order == schema_order);
}

TEST_CASE("config/README.md's field tables are the schema's", "[config][schema]") {
  // To refresh the tables after a schema change: set this variable, run the
  // test, and copy the type and default columns into the README.
  if (const char* out = std::getenv("CONVEYOR_CONFIG_SCHEMA_OUT")) {
    std::ofstream(out) << ConfigSchemaMarkdown();
  }
  const std::string readme = conveyor::testing::ReadConfigReadme();
  REQUIRE_FALSE(readme.empty());
  ExpectTableMatches(readme, kDaemonFieldsHeading, DaemonFieldDocs());
  ExpectTableMatches(readme, kPipelineFieldsHeading, PipelineFieldDocs());
}

TEST_CASE("the table check sees a changed default, bound or field", "[config][schema]") {
  const std::string table = absl::StrCat(kDaemonFieldsHeading, "\n\nprose\n\n",
                                         FieldTableMarkdown(DaemonFieldDocs()), "\nafter\n");
  const std::vector<FieldDoc> parsed = ParseFieldTable(table, kDaemonFieldsHeading);
  REQUIRE(parsed.size() == DaemonFieldDocs().size());
  for (size_t i = 0; i < parsed.size(); ++i) {
    CHECK(parsed[i].field == DaemonFieldDocs()[i].field);
    CHECK(parsed[i].type == DaemonFieldDocs()[i].type);  // "\|" stays inside its cell
    CHECK(parsed[i].default_value == DaemonFieldDocs()[i].default_value);
  }
  // A README row edited by hand no longer parses equal.
  std::string edited = table;
  const std::string row = "| `max_streams` | integer 1–100000 | `64` |";
  REQUIRE(edited.find(row) != std::string::npos);
  edited.replace(edited.find(row), row.size(), "| `max_streams` | integer 1–100000 | `65` |");
  CHECK(ByField(ParseFieldTable(edited, kDaemonFieldsHeading))["max_streams"].default_value ==
        "`65`");
  CHECK(ParseFieldTable(table, "## No such heading").empty());
}

TEST_CASE("unknown keys are refused listing the section's declared keys", "[config][schema]") {
  const std::string pipeline = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  absl::StatusOr<DaemonConfig> c = Parse("engine: {fetch_threads: 2}\n" + pipeline);
  REQUIRE_FALSE(c.ok());
  const std::string msg(c.status().message());
  CHECK(absl::StrContains(msg, "field engine.fetch_threads: unknown field (known: "));
  for (const FieldDoc& r : DaemonFieldDocs()) {
    if (!absl::StartsWith(r.field, "engine.")) continue;
    INFO(msg);
    CHECK(absl::StrContains(msg, r.field.substr(std::string("engine.").size())));
  }
  // Pipeline keys include the video fields (declared in their own section).
  c = Parse(pipeline + "    clip_frame: 3\n");
  REQUIRE_FALSE(c.ok());
  CHECK(absl::StrContains(c.status().message(), "clip_frames"));
  CHECK(absl::StrContains(c.status().message(), "max_batch_size"));
  CHECK(absl::StrContains(c.status().message(), "(line 4)"));
}

TEST_CASE("bounds the core owns come from its constants", "[config][schema]") {
  auto with = [](const std::string& line) {
    return Parse(absl::StrCat("pipelines:\n  p:\n    dataset: {root: /data}\n    ", line, "\n"));
  };
  REQUIRE(with(absl::StrCat("max_batch_size: ", kMaxBatchSize)).ok());
  absl::StatusOr<DaemonConfig> c = with(absl::StrCat("max_batch_size: ", kMaxBatchSize + 1));
  REQUIRE_FALSE(c.ok());
  CHECK(absl::StrContains(c.status().message(), absl::StrCat("[1, ", kMaxBatchSize, "]")));

  REQUIRE(with(absl::StrCat("size: ", kMaxOutputSide)).ok());
  CHECK_FALSE(with(absl::StrCat("size: ", kMaxOutputSide + 1)).ok());
  CHECK_FALSE(
      with(absl::StrCat("kind: audio\n    audio: {channels: ", kMaxAudioChannels + 1, "}")).ok());

  const std::string minimal = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  REQUIRE(Parse(absl::StrCat("threads: ", kMaxEngineThreads, "\n", minimal)).ok());
  CHECK_FALSE(Parse(absl::StrCat("threads: ", kMaxEngineThreads + 1, "\n", minimal)).ok());

  // And the documented bounds are the same numbers.
  const auto daemon = ByField(DaemonFieldDocs());
  CHECK(daemon.at("threads").type == UintType(0, kMaxEngineThreads));
  const auto pipe = ByField(PipelineFieldDocs());
  CHECK(pipe.at("max_batch_size").type == UintType(1, kMaxBatchSize));
  CHECK(pipe.at("height").type == UintType(1, kMaxOutputSide));
  CHECK(pipe.at("clip_frames").type == UintType(1, kMaxClipFrames));
  CHECK(pipe.at("audio.sample_rate").type == UintType(kMinAudioSampleRate, kMaxAudioSampleRate));
  CHECK(pipe.at("max_decode_memory").type == SizeType(kMinDecodeMemory, false));
}

TEST_CASE("documented defaults are the parse's defaults", "[config][schema]") {
  absl::StatusOr<DaemonConfig> c = Parse("pipelines:\n  p:\n    dataset: {root: /data}\n");
  REQUIRE(c.ok());
  const auto daemon = ByField(DaemonFieldDocs());
  const auto pipe = ByField(PipelineFieldDocs());
  const PipelineConfig& p = c->pipelines[0].config;
  CHECK(daemon.at("max_streams").default_value == absl::StrCat("`", c->max_streams, "`"));
  CHECK(daemon.at("engine.fetch_concurrency").default_value ==
        absl::StrCat("`", c->engine.fetch_concurrency, "`"));
  CHECK(daemon.at("engine.fetch_queue_bytes").default_value ==
        absl::StrCat("`", FormatSizeBound(c->engine.fetch_queue_bytes), "`"));
  CHECK(daemon.at("remote.max_attempts").default_value ==
        absl::StrCat("`", c->remote.max_attempts, "`"));
  CHECK(daemon.at("log_level").default_value == absl::StrCat("`", c->log_level, "`"));
  CHECK(pipe.at("max_batch_size").default_value == absl::StrCat("`", p.max_batch_size, "`"));
  CHECK(pipe.at("max_file_bytes").default_value ==
        absl::StrCat("`", FormatSizeBound(p.max_file_bytes), "`"));
  CHECK(pipe.at("layout").default_value ==
        absl::StrCat("`", absl::AsciiStrToLower(ToString(p.transform.layout)), "`"));
  CHECK(pipe.at("error_policy").default_value == absl::StrCat("`", ToString(p.error_policy), "`"));
  CHECK(pipe.at("max_failure_rate").default_value ==
        absl::StrCat("`", FormatNumberBound(p.max_failure_rate), "`"));
}

TEST_CASE("bounds and defaults are written the reference's way", "[config][schema]") {
  CHECK(FormatUintBound(1024) == "1024");
  CHECK(FormatUintBound(uint64_t{1} << 34) == "2^34");
  CHECK(FormatUintBound((uint64_t{1} << 34) + 1) == "17179869185");
  CHECK(FormatNumberBound(0.001) == "0.001");
  CHECK(FormatNumberBound(604800) == "604800");
  CHECK(FormatNumberBound(1e7) == "1e7");
  CHECK(FormatNumberBound(-1e6) == "-1e6");
  CHECK(FormatNumberBound(1e-12) == "1e-12");
  CHECK(FormatNumberBound(1e-9) == "1e-9");
  CHECK(FormatNumberBound(4.0 / 3.0) == "1.33333");
  CHECK(FormatSizeBound(uint64_t{64} << 20) == "64MiB");
  CHECK(FormatSizeBound(1) == "1B");
  CHECK(FormatSizeBound(0) == "0");
  CHECK(UintType(1, 4096) == "integer 1–4096");
  CHECK(SizeType(0, true) == "size or `N%`");
  CHECK(SizeType(uint64_t{1} << 20, false) == "size ≥ 1MiB");
  CHECK(Quoted("") == "none");
  CHECK(Quoted("x") == "`x`");
  const std::string md = ConfigSchemaMarkdown();
  CHECK(absl::StartsWith(md, absl::StrCat(kDaemonFieldsHeading, "\n\n| field | type |")));
  CHECK(absl::StrContains(md,
                          "| `audio.crop` | `auto` \\| `random` \\| `centre` (`center`) | "
                          "`auto` |"));
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
