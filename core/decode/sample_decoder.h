// SampleDecoder: the Decode stage's interface — turns one sample's bytes into
// its place in the batch slot (decode + augment + convert). The engine makes
// one per worker thread with EngineOptions::decoder_factory (default:
// SampleTransformer, libjpeg-turbo with the pipeline's TransformSpec), so an
// implementation may keep per-thread scratch state without locks. Other
// formats (FFmpeg) and synthetic stages (benchmarks of the scheduler) are
// further implementations.
//
// Thread-safety: one instance per worker thread; never shared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/sample_geometry.h"
#include "core/decode/transform_spec.h"

namespace conveyor {

class SampleDecoder {
 public:
  virtual ~SampleDecoder() = default;
  // Writes exactly SampleBytes(spec) bytes at `out`, drawing any randomness
  // from `rng`. Errors are the sample's (error_policy applies): the caller
  // adds the sample's name. REQUIRES: out has SampleBytes(spec) writable
  // bytes, aligned to ElementSize(spec.dtype).
  virtual absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                           uint8_t* out) = 0;
  // Where the last successful Run's pixels came from in its source image
  // (core/decode/sample_geometry.h), for annotations that move with the
  // image; null when the decoder does not say (video, audio, synthetic).
  virtual const SampleGeometry* LastGeometry() const { return nullptr; }
  // What the last successful Run drew, as one JSON object (the crop, the
  // flips, the whole-image ops' parameters) in *out; false when the decoder
  // does not say.
  virtual bool LastDraws(std::string* /*out*/) const { return false; }
  // Decodes `bytes`, a second image of the sample (a segmentation mask of
  // the same size as its image), and writes its first channel at `out`,
  // geometry.output_height × geometry.output_width uint8 values, each the
  // nearest source pixel through `geometry` (the image's crop, resize and
  // flip): torchvision's NEAREST rule, source = floor((o + 0.5 + offset) /
  // scale). Errors are the sample's. The default: decoders without masks.
  virtual absl::Status RunMask(std::span<const uint8_t> /*bytes*/, const TransformSpec& /*spec*/,
                               const SampleGeometry& /*geometry*/, uint8_t* /*out*/) {
    return absl::UnimplementedError("this pipeline's decoder does not decode masks");
  }
};

using SampleDecoderFactory = std::function<std::unique_ptr<SampleDecoder>()>;

}  // namespace conveyor
