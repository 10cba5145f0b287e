// The decode-and-collate property check that the image fuzz targets share:
// one sample's bytes decoded twice into a two-sample batch slot (as the
// engine's workers write them), each failure a documented error, the same
// input and draws giving the same verdict and the same pixels, then the
// collate stage's compaction of the failed sample(s).
//
// Thread-safety: libFuzzer calls targets from one thread; so must callers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/sample_decoder.h"
#include "core/decode/transform_spec.h"
#include "core/engine/batch_layout.h"
#include "core/engine/collate.h"
#include "tests/fuzz/fuzz_target.h"

namespace conveyor::fuzz {

// The image targets' transform, drawn from the input's hash: train or eval,
// output 8..39 a side, any dtype and layout, DCT scaling on or off; images
// over 2^20 pixels are refused by max_pixels so that every run stays fast.
inline TransformSpec ImageSpecFor(uint64_t h) {
  TransformSpec spec;
  spec.mode = (h & 1) ? AugmentMode::kTrain : AugmentMode::kEval;
  spec.output_height = 8 + static_cast<int>((h >> 1) & 31);
  spec.output_width = 8 + static_cast<int>((h >> 6) & 31);
  spec.resize_size =
      std::max(spec.output_height, spec.output_width) + static_cast<int>((h >> 11) & 7);
  static constexpr DType kTypes[] = {DType::kUint8, DType::kFloat32, DType::kFloat16};
  spec.dtype = kTypes[((h >> 14) & 3) % 3];
  spec.layout = (h >> 16) & 1 ? Layout::kNHWC : Layout::kNCHW;
  spec.dct_scaling = ((h >> 17) & 1) != 0;
  spec.max_pixels = 1u << 20;
  return spec;
}

// Aborts (FUZZ_CHECK) when a property fails. `documented` says whether a
// failure's status is one the decoder documents.
template <typename DocumentedFn>
void CheckTwoSampleBatch(SampleDecoder& decoder, std::span<const uint8_t> bytes,
                         const TransformSpec& spec, uint64_t h, DocumentedFn documented) {
  const BatchLayout layout = BatchLayout::For(spec, 2);
  // Aligned for every element type (the engine's slots are page-aligned).
  std::vector<uint64_t> slot_words((layout.slot_bytes + 7) / 8, 0xA5A5A5A5A5A5A5A5ull);
  uint8_t* const slot = reinterpret_cast<uint8_t*>(slot_words.data());

  uint8_t failed[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    Rng rng(h + i);
    const absl::Status st =
        decoder.Run(bytes, spec, rng, slot + layout.images_offset + i * layout.sample_bytes);
    if (!st.ok()) {
      FUZZ_CHECK(documented(st));
      failed[i] = 1;
    }
    std::memcpy(slot + layout.labels_offset + i * 8, &i, sizeof(i));
  }
  // The same input and draws give the same verdict, and the same pixels.
  FUZZ_CHECK(failed[0] == failed[1] || spec.mode == AugmentMode::kTrain);
  if (!failed[0]) {
    std::vector<uint8_t> again(layout.sample_bytes);
    Rng rng(h);
    FUZZ_CHECK(decoder.Run(bytes, spec, rng, again.data()).ok());
    FUZZ_CHECK(std::memcmp(again.data(), slot + layout.images_offset, layout.sample_bytes) == 0);
  }
  const uint32_t kept = CompactSamples(layout, slot, std::span<const uint8_t>(failed, 2));
  FUZZ_CHECK(kept == 2u - failed[0] - failed[1]);
}

}  // namespace conveyor::fuzz
