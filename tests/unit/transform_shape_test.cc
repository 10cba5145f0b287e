// SampleShape and SampleBytes for each media kind and layout.
#include <catch2/catch.hpp>

#include "core/decode/transform_spec.h"

namespace conveyor {
namespace {

TEST_CASE("SampleShape: images, video clips and audio clips", "[transform]") {
  TransformSpec t;
  t.output_height = 4;
  t.output_width = 5;
  CHECK(SampleShape(t) == std::vector<int64_t>{3, 4, 5});
  CHECK(SampleBytes(t) == 60);
  t.layout = Layout::kNHWC;
  t.dtype = DType::kFloat32;
  CHECK(SampleShape(t) == std::vector<int64_t>{4, 5, 3});
  CHECK(SampleBytes(t) == 240);

  t.kind = MediaKind::kVideo;
  t.video.clip_frames = 7;
  CHECK(SampleShape(t) == std::vector<int64_t>{7, 4, 5, 3});
  t.layout = Layout::kNCHW;
  t.dtype = DType::kUint8;
  CHECK(SampleShape(t) == std::vector<int64_t>{7, 3, 4, 5});
  CHECK(SampleBytes(t) == 7 * 60);

  t.kind = MediaKind::kAudio;
  t.dtype = DType::kFloat32;
  t.audio.channels = 2;
  t.audio.clip_samples = 100;
  CHECK(SampleShape(t) == std::vector<int64_t>{2, 100});
  CHECK(SampleBytes(t) == 800);
  CHECK(std::string(ToString(MediaKind::kAudio)) == "audio");
}

}  // namespace
}  // namespace conveyor
