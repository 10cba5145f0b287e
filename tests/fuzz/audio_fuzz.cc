// Fuzz target: bytes as an audio file through the decode stage of a
// `kind: audio` pipeline — AudioClipDecoder (FFmpeg demux + decode,
// libswresample, crop, padding) writing two clips into a batch slot, then
// the collate stage's compaction of the failed one(s). Parameters (train or
// eval, output rate, 1 or 2 channels, clip length 1..4096, padding) come
// from a hash of the input; max_samples 2^20 and max_duration_seconds 120
// keep every run small, max_decode_seconds 10 stops a runaway file.
// Properties: no sanitizer report; errors carry a message starting "audio"
// and are InvalidArgument, ResourceExhausted or DeadlineExceeded; a clip
// that decodes once decodes again to the same bytes on the same decoder (no
// state leaks between samples through the kept resampler and buffers).
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/audio_clip_decoder.h"
#include "core/decode/transform_spec.h"
#include "core/engine/batch_layout.h"
#include "core/engine/collate.h"
#include "tests/fuzz/fuzz_target.h"

namespace conveyor::fuzz {
namespace {

TransformSpec SpecFor(uint64_t h) {
  TransformSpec spec;
  spec.kind = MediaKind::kAudio;
  spec.dtype = DType::kFloat32;
  spec.mode = (h & 1) ? AugmentMode::kTrain : AugmentMode::kEval;
  static constexpr int kRates[] = {8000, 16000, 22050, 44100, 48000, 96000};
  spec.audio.sample_rate = kRates[((h >> 1) & 7) % 6];
  spec.audio.channels = 1 + static_cast<int>((h >> 4) & 1);
  spec.audio.clip_samples = 1 + static_cast<int64_t>((h >> 5) & 4095);
  spec.audio.padding = (h >> 17) & 1 ? AudioPadding::kBoth : AudioPadding::kEnd;
  spec.audio.max_samples = 1u << 20;
  spec.audio.max_duration_seconds = 120;
  spec.max_decode_seconds = 10;
  return spec;
}

bool DocumentedError(const absl::Status& st) {
  return (absl::IsInvalidArgument(st) || absl::IsResourceExhausted(st) ||
          absl::IsDeadlineExceeded(st)) &&
         st.message().substr(0, 5) == "audio";
}

}  // namespace
}  // namespace conveyor::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  const uint64_t h = fuzz::HashBytes(data, size);
  const TransformSpec spec = fuzz::SpecFor(h);
  FUZZ_CHECK(ValidateTransformSpec(spec).ok());
  const std::span<const uint8_t> bytes(data, size);

  // One decoder per worker thread in the engine; one here, reused.
  static AudioClipDecoder* decoder = new AudioClipDecoder();
  const BatchLayout layout = BatchLayout::For(spec, 2);
  std::vector<uint64_t> slot_words((layout.slot_bytes + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);
  uint8_t* const slot = reinterpret_cast<uint8_t*>(slot_words.data());

  uint8_t failed[2] = {0, 0};
  bool over_time = false;
  for (int i = 0; i < 2; ++i) {
    Rng rng(h + i);
    const absl::Status st =
        decoder->Run(bytes, spec, rng, slot + layout.images_offset + i * layout.sample_bytes);
    if (!st.ok()) {
      FUZZ_CHECK(fuzz::DocumentedError(st));
      failed[i] = 1;
    }
    over_time |= absl::IsDeadlineExceeded(st);
    std::memcpy(slot + layout.labels_offset + i * 8, &i, sizeof(i));
  }
  // Deadline errors aside, the same bytes give the same verdict.
  FUZZ_CHECK(failed[0] == failed[1] || over_time);
  if (!failed[0]) {
    std::vector<uint8_t> again(layout.sample_bytes);
    Rng rng(h);
    const absl::Status st = decoder->Run(bytes, spec, rng, again.data());
    if (!absl::IsDeadlineExceeded(st)) {
      FUZZ_CHECK(st.ok());
      FUZZ_CHECK(std::memcmp(again.data(), slot + layout.images_offset, layout.sample_bytes) == 0);
    }
  }
  const uint32_t kept = CompactSamples(layout, slot, std::span<const uint8_t>(failed, 2));
  FUZZ_CHECK(kept == 2u - failed[0] - failed[1]);
  return 0;
}
