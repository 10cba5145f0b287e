#include "core/decode/media_decoder.h"

#include "absl/strings/str_cat.h"
#include "core/decode/audio_clip_decoder.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/video_clip_decoder.h"

namespace conveyor {

MediaDecoder::MediaDecoder() = default;
MediaDecoder::~MediaDecoder() = default;

absl::Status MediaDecoder::Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                               uint8_t* out) {
  switch (spec.kind) {
    case MediaKind::kImage:
      if (image_ == nullptr) image_ = std::make_unique<SampleTransformer>();
      last_ = image_.get();
      return image_->Run(bytes, spec, rng, out);
    case MediaKind::kVideo:
      if (video_ == nullptr) video_ = std::make_unique<VideoClipDecoder>();
      last_ = video_.get();
      return video_->Run(bytes, spec, rng, out);
    case MediaKind::kAudio:
      if (audio_ == nullptr) audio_ = std::make_unique<AudioClipDecoder>();
      last_ = audio_.get();
      return audio_->Run(bytes, spec, rng, out);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no decoder for pipelines of kind ", static_cast<int>(spec.kind)));
}

}  // namespace conveyor
