// Tests of the pipeline fingerprint (core/engine/pipeline_fingerprint.h): its
// parts, and that each part changes exactly when what it names changes.
#include "core/engine/pipeline_fingerprint.h"

#include <map>
#include <string>

#include <catch2/catch.hpp>

#include "core/decode/decoder_versions.h"
#include "tests/unit/engine_test_util.h"
#include "tests/unit/field_spec_of.h"
#include "tests/unit/temp_dir.h"

namespace conveyor {
namespace {

using testing::TempDir;

std::map<std::string, std::string> Parts(const PipelineConfig& p) {
  std::map<std::string, std::string> m;
  for (auto& [k, v] : PipelineFingerprint(p)) m.emplace(k, v);
  return m;
}

// The names of the parts that differ between a and b.
std::vector<std::string> Differ(const PipelineConfig& a, const PipelineConfig& b) {
  const auto pa = Parts(a), pb = Parts(b);
  REQUIRE(pa.size() == pb.size());
  std::vector<std::string> out;
  for (const auto& [k, v] : pa) {
    if (pb.at(k) != v) out.push_back(k);
  }
  return out;
}

TEST_CASE("pipeline fingerprint: one part per input of the batches, each changing alone",
          "[engine][fingerprint]") {
  TempDir one, two;
  testing::MakeImageFolder(one.path(), 2, 3);
  testing::MakeImageFolder(two.path(), 2, 3);  // the same names and labels elsewhere
  auto a = testing::MakePipeline(one.path());
  auto same = testing::MakePipeline(two.path());
  const auto parts = Parts(*a);
  CHECK(parts.size() == 6);
  for (const char* name : {"dataset", "transform", "samples", "order", "fields", "decoders"}) {
    CHECK(parts.count(name) == 1);
  }
  CHECK(parts.at("dataset").rfind("digest=sha256:", 0) == 0);
  CHECK(parts.at("dataset").find(";samples=6") != std::string::npos);
  CHECK(parts.at("decoders") == DecoderVersions());
  CHECK(parts.at("decoders").find("libjpeg-turbo=") != std::string::npos);
  CHECK(parts.at("order") == "global");
  CHECK(Differ(*a, *same).empty());

  auto b = testing::MakePipeline(one.path());
  b->transform.mode = AugmentMode::kEval;
  CHECK(Differ(*a, *b) == std::vector<std::string>{"transform"});
  b = testing::MakePipeline(one.path(), 48);
  CHECK(Differ(*a, *b) == std::vector<std::string>{"transform"});
  b = testing::MakePipeline(one.path());
  b->error_policy = ErrorPolicy::kFailFast;
  CHECK(Differ(*a, *b) == std::vector<std::string>{"samples"});
  b = testing::MakePipeline(one.path());
  b->max_file_bytes = 1000;
  CHECK(Differ(*a, *b) == std::vector<std::string>{"samples"});
  CHECK(parts.at("fields").empty());
  b = testing::MakePipeline(one.path());
  b->fields.push_back(testing::FieldSpecOf("key", FieldType::kKey, "", true, 256));
  CHECK(Differ(*a, *b) == std::vector<std::string>{"fields"});
  CHECK(Parts(*b).at("fields") == "key=key,,required,256;");
  // Speed-only settings are not parts.
  b = testing::MakePipeline(one.path());
  b->max_batch_size = 7;
  b->cache_output = true;
  CHECK(Differ(*a, *b).empty());

  TempDir more;
  testing::MakeImageFolder(more.path(), 2, 4);
  b = testing::MakePipeline(more.path());
  CHECK(Differ(*a, *b) == std::vector<std::string>{"dataset"});
}

}  // namespace
}  // namespace conveyor
