// Fuzz target: bytes as a video file through VideoClipDecoder (the demuxer
// over memory, the packet listing, the seek, the decoder, libswscale into the
// slot). Parameters (train or eval, clip 1..4 frames, stride or fps, clip
// start, layout, output 8..23 px) come from a hash of the input; max_pixels
// 2^16, max_frames_decoded 64 and a 2 s budget keep every run short.
// Properties: no sanitizer report; errors carry a message and are errors of
// the sample (InvalidArgument, DataLoss, ResourceExhausted); a clip that
// decodes once decodes again to the same bytes (no state leaks between
// samples).
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/transform_spec.h"
#include "core/decode/video_clip_decoder.h"
#include "tests/fuzz/fuzz_target.h"

namespace conveyor::fuzz {
namespace {

TransformSpec SpecFor(uint64_t h) {
  TransformSpec spec;
  spec.kind = MediaKind::kVideo;
  spec.mode = (h & 1) ? AugmentMode::kTrain : AugmentMode::kEval;
  spec.output_height = 8 + static_cast<int>((h >> 1) & 15);
  spec.output_width = 8 + static_cast<int>((h >> 5) & 15);
  spec.resize_size =
      std::max(spec.output_height, spec.output_width) + static_cast<int>((h >> 9) & 7);
  spec.layout = (h >> 12) & 1 ? Layout::kNHWC : Layout::kNCHW;
  spec.video.clip_frames = 1 + static_cast<int>((h >> 13) & 3);
  if ((h >> 15) & 1) {
    spec.video.fps = 1.0 + static_cast<double>((h >> 16) & 31);
  } else {
    spec.video.frame_stride = 1 + static_cast<int>((h >> 16) & 3);
  }
  static constexpr ClipStart kStarts[] = {ClipStart::kRandom, ClipStart::kCenter,
                                          ClipStart::kStart};
  spec.video.clip_start = kStarts[((h >> 21) & 3) % 3];
  spec.max_pixels = 1u << 16;
  spec.video.max_frames_decoded = 64;
  spec.max_decode_seconds = 2;
  return spec;
}

bool DocumentedError(const absl::Status& st) {
  return (absl::IsInvalidArgument(st) || absl::IsDataLoss(st) || absl::IsResourceExhausted(st)) &&
         !st.message().empty();
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  const uint64_t h = fuzz::HashBytes(data, size);
  const TransformSpec spec = fuzz::SpecFor(h);
  FUZZ_CHECK(ValidateTransformSpec(spec).ok());
  const std::span<const uint8_t> bytes(data, size);
  static VideoClipDecoder* decoder = new VideoClipDecoder();
  std::vector<uint8_t> out(SampleBytes(spec), 0xA5);
  Rng rng(h);
  const absl::Status st = decoder->Run(bytes, spec, rng, out.data());
  if (!st.ok()) {
    FUZZ_CHECK(fuzz::DocumentedError(st));
    return 0;
  }
  std::vector<uint8_t> again(out.size(), 0x5A);
  Rng same(h);
  const absl::Status st2 = decoder->Run(bytes, spec, same, again.data());
  // A deadline can only be met once on a loaded machine; anything else repeats.
  FUZZ_CHECK(st2.ok() || absl::IsResourceExhausted(st2));
  if (st2.ok()) FUZZ_CHECK(std::memcmp(out.data(), again.data(), out.size()) == 0);
  return 0;
}
