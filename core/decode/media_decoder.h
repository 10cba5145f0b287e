// MediaDecoder: the engine's default SampleDecoder. It sends each sample to
// the decoder of its pipeline's kind (TransformSpec::kind): images to
// SampleTransformer (JPEG through libjpeg-turbo, other formats through
// FFmpeg, chosen by content), video clips and audio clips to their FFmpeg
// decoders. Each is made on first use, so a worker only holds the state of
// the kinds it has decoded.
//
// Thread-safety: one instance per worker thread (SampleDecoder's contract).
#pragma once

#include <memory>

#include "core/decode/sample_decoder.h"

namespace conveyor {

class MediaDecoder final : public SampleDecoder {
 public:
  MediaDecoder();
  ~MediaDecoder() override;

  absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                   uint8_t* out) override;
  // The geometry of the last Run's decoder (images only).
  bool LastDraws(std::string* out) const override {
    return last_ != nullptr && last_->LastDraws(out);
  }
  const SampleGeometry* LastGeometry() const override {
    return last_ != nullptr ? last_->LastGeometry() : nullptr;
  }
  absl::Status RunMask(std::span<const uint8_t> bytes, const TransformSpec& spec,
                       const SampleGeometry& geometry, uint8_t* out) override {
    if (last_ == nullptr) return SampleDecoder::RunMask(bytes, spec, geometry, out);
    return last_->RunMask(bytes, spec, geometry, out);
  }

 private:
  SampleDecoder* last_ = nullptr;  // the decoder of the last Run
  std::unique_ptr<SampleDecoder> image_;
  std::unique_ptr<SampleDecoder> video_;
  std::unique_ptr<SampleDecoder> audio_;
};

}  // namespace conveyor
