// Per-stream choices (core/engine/stream_choices.h): a stream's own size,
// dtype and fields within its pipeline's bounds, as a view of the pipeline;
// and a stream on such a view decodes at its size, in its dtype.
#include "core/engine/stream_choices.h"

#include <algorithm>

#include <catch2/catch.hpp>

#include "tests/unit/engine_test_util.h"
#include "tests/unit/field_spec_of.h"
#include "tests/unit/temp_dir.h"

namespace conveyor {
namespace {

using testing::TempDir;

std::string Why(const absl::StatusOr<std::shared_ptr<const PipelineConfig>>& v) {
  REQUIRE_FALSE(v.ok());
  CHECK(v.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST_CASE("stream choices: a view within the pipeline's bounds, or a refusal naming them",
          "[engine][choices]") {
  TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 2);
  auto p = testing::MakePipeline(dir.path(), 32);
  p->allowed_sizes = {{16, 16}, {24, 40}};
  p->allowed_dtypes = {DType::kFloat16};
  p->fields = {testing::FieldSpecOf("key", FieldType::kKey, "", true, 256),
               testing::FieldSpecOf("path", FieldType::kKey, "", true, 64)};
  p->parts = std::make_shared<WholeFileParts>(p->dataset);
  std::shared_ptr<const PipelineConfig> pipeline = p;

  // Nothing chosen, or the pipeline's own: the pipeline itself.
  CHECK(*PipelineForStream(pipeline, {}) == pipeline);
  StreamChoices own;
  own.output_height = own.output_width = 32;
  own.dtype = DType::kUint8;
  own.fields = std::vector<std::string>{"path", "key"};
  CHECK(*PipelineForStream(pipeline, own) == pipeline);

  StreamChoices c;
  c.output_height = 24;
  c.output_width = 40;
  c.dtype = DType::kFloat16;
  c.fields = std::vector<std::string>{"path"};
  auto view = PipelineForStream(pipeline, c);
  REQUIRE(view.ok());
  CHECK((*view)->transform.output_height == 24);
  CHECK((*view)->transform.output_width == 40);
  CHECK((*view)->transform.dtype == DType::kFloat16);
  REQUIRE((*view)->fields.size() == 1);
  CHECK((*view)->fields[0].name == "path");
  CHECK((*view)->dataset == pipeline->dataset);
  CHECK(pipeline->transform.output_height == 32);  // the pipeline is unchanged

  StreamChoices none;
  none.fields = std::vector<std::string>{};
  CHECK((*PipelineForStream(pipeline, none))->fields.empty());

  StreamChoices bad;
  bad.output_height = bad.output_width = 48;
  CHECK(Why(PipelineForStream(pipeline, bad)) ==
        "output size 48x48 is not allowed by pipeline test (allowed_sizes: 32x32, 16x16, 24x40)");
  bad = {};
  bad.output_height = 16;
  CHECK(Why(PipelineForStream(pipeline, bad)).find("give both height and width") !=
        std::string::npos);
  bad = {};
  bad.dtype = DType::kFloat32;
  CHECK(Why(PipelineForStream(pipeline, bad)) ==
        "dtype float32 is not allowed by pipeline test (allowed_dtypes: uint8, float16)");
  bad = {};
  bad.fields = std::vector<std::string>{"caption"};
  CHECK(Why(PipelineForStream(pipeline, bad)) ==
        "field 'caption' is not a field of pipeline test (its fields: key, path)");
  bad.fields = std::vector<std::string>{"key", "key"};
  CHECK(Why(PipelineForStream(pipeline, bad)) == "field 'key' is asked for twice");
}

TEST_CASE("stream choices: an eval pipeline's resize scales with the chosen size",
          "[engine][choices]") {
  TempDir dir;
  testing::MakeImageFolder(dir.path(), 1, 1);
  auto p = testing::MakePipeline(dir.path(), 224);
  p->transform.mode = AugmentMode::kEval;
  p->transform.resize_size = 256;
  p->allowed_sizes = {{160, 160}, {300, 100}};
  StreamChoices c;
  c.output_height = c.output_width = 160;
  auto view = PipelineForStream(p, c);
  REQUIRE(view.ok());
  CHECK((*view)->transform.resize_size == 183);  // ceil(256 × 160 / 224)
  c.output_height = 300;
  c.output_width = 100;
  view = PipelineForStream(p, c);
  REQUIRE(view.ok());
  CHECK((*view)->transform.resize_size == 343);  // ceil(256 × 300 / 224)
}

TEST_CASE("stream choices: a stream on a view delivers its size and dtype", "[engine][choices]") {
  TempDir dir;
  testing::MakeImageFolder(dir.path(), 2, 2);
  auto p = testing::MakePipeline(dir.path(), 32);
  p->allowed_sizes = {{16, 8}};
  p->allowed_dtypes = {DType::kFloat32};
  StreamChoices c;
  c.output_height = 16;
  c.output_width = 8;
  c.dtype = DType::kFloat32;
  auto view = PipelineForStream(p, c);
  REQUIRE(view.ok());
  auto engine = testing::MakeEngine(2);
  StreamOptions o;
  o.batch_size = 4;
  o.shuffle = false;
  auto plan = PlanStream(**view, o);
  REQUIRE(plan.ok());
  CHECK(plan->layout.sample_bytes == 16 * 8 * 3 * sizeof(float));
  auto stream = engine->OpenStream(*view, *plan);
  REQUIRE(stream.ok());
  const testing::Collected got = testing::Drain(**stream);
  REQUIRE(got.end.ok());
  CHECK(got.indices.size() == 4);
  CHECK(got.images.size() == 4 * 16 * 8 * 3 * sizeof(float));
  // Normalised floats, not bytes: values around 0, some negative.
  const auto* values = reinterpret_cast<const float*>(got.images.data());
  CHECK(std::any_of(values, values + 4 * 16 * 8 * 3, [](float v) { return v < 0; }));
}

}  // namespace
}  // namespace conveyor
