// The kind-specific fields of a pipeline: the video fields (kind video; keys
// of the pipeline's own map) and the `audio` map (kind audio), with the
// decoders' bounds from core/decode/transform_spec.h.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// The config's own bounds of the hostile-media limits.
constexpr uint64_t kMaxFramesDecoded = uint64_t{1} << 24;
constexpr double kMinLimitSeconds = 0.001;
constexpr double kMaxMediaDurationSeconds = 1e7;
constexpr uint64_t kMaxAudioSamples = uint64_t{1} << 34;
constexpr double kMinClipSeconds = 1e-6;
constexpr double kMaxClipSeconds = 86400;

VideoSpec& Video(PipelineSpec& p) { return p.config.transform.video; }

const Section<AudioSpec>& AudioSection() {
  using schema::Custom;
  using schema::Enum;
  using schema::Number;
  using schema::Uint;
  static const Section<AudioSpec> kSection({
      Uint<AudioSpec>("sample_rate", &AudioSpec::sample_rate, kMinAudioSampleRate,
                      kMaxAudioSampleRate, "every file is resampled to this rate"),
      Uint<AudioSpec>("channels", &AudioSpec::channels, 1, kMaxAudioChannels,
                      "channels of a clip (mixed down or copied)"),
      Uint<AudioSpec>("clip_samples", &AudioSpec::clip_samples, 1, kMaxAudioClipSamples,
                      "`L`, samples per channel of a clip")
          .WithDefault("`sample_rate` (one second)"),
      Custom<AudioSpec>(
          "clip_seconds", NumberType(kMinClipSeconds, kMaxClipSeconds), "none",
          "`L` as `round(clip_seconds × sample_rate)`",
          [](const YamlFields& y, const YAML::Node& n, const std::string& field,
             AudioSpec* a) -> absl::Status {
            double seconds = 0;
            RETURN_IF_ERROR(y.ReadDouble(n, field, kMinClipSeconds, kMaxClipSeconds, &seconds));
            const double samples = std::round(seconds * a->sample_rate);
            if (samples < 1 || samples > static_cast<double>(kMaxAudioClipSamples)) {
              return y.Error(
                  field, n,
                  absl::StrCat("gives ", absl::StrFormat("%.0f", samples), " samples at ",
                               a->sample_rate, " Hz; must be 1 to ", kMaxAudioClipSamples));
            }
            a->clip_samples = static_cast<int64_t>(samples);
            return absl::OkStatus();
          }),
      Enum<AudioSpec>(
          "crop", &AudioSpec::crop,
          std::vector<std::pair<std::string, AudioCrop>>{{"auto", AudioCrop::kAuto},
                                                         {"random", AudioCrop::kRandom},
                                                         {"centre", AudioCrop::kCentre},
                                                         {"center", AudioCrop::kCentre}},
          "where the clip lies in a longer file"),
      Enum<AudioSpec>("padding", &AudioSpec::padding,
                      std::vector<std::pair<std::string, AudioPadding>>{
                          {"end", AudioPadding::kEnd}, {"both", AudioPadding::kBoth}},
                      "where the zeros of a shorter file go"),
      Uint<AudioSpec>("max_samples", &AudioSpec::max_samples, 1, kMaxAudioSamples,
                      "samples per channel a file may decode to"),
      Number<AudioSpec>("max_duration_seconds", &AudioSpec::max_duration_seconds, kMinLimitSeconds,
                        kMaxMediaDurationSeconds,
                        "a file declaring or decoding to a longer duration fails"),
  });
  return kSection;
}

}  // namespace

const Section<PipelineSpec>& VideoSection() {
  using schema::Bool;
  using schema::Enum;
  using schema::Number;
  using schema::Uint;
  static const Section<PipelineSpec> kSection({
      Uint<PipelineSpec>(
          "clip_frames", [](PipelineSpec & p) -> auto& { return Video(p).clip_frames; }, 1,
          kMaxClipFrames, "video: frames per clip (T)"),
      Uint<PipelineSpec>(
          "frame_stride", [](PipelineSpec & p) -> auto& { return Video(p).frame_stride; }, 1,
          kMaxFrameStride, "video: every `frame_stride`-th frame"),
      Number<PipelineSpec>(
          "fps", [](PipelineSpec & p) -> auto& { return Video(p).fps; }, kMinLimitSeconds,
          kMaxClipFps, "video: sample by time at this rate")
          .WithDefault("none"),
      Enum<PipelineSpec>(
          "clip_start", [](PipelineSpec & p) -> auto& { return Video(p).clip_start; },
          std::vector<std::pair<std::string, ClipStart>>{{"random", ClipStart::kRandom},
                                                         {"center", ClipStart::kCenter},
                                                         {"start", ClipStart::kStart}},
          "video: where the clip starts")
          .WithDefault("`random` (train), `center` (eval)"),
      Uint<PipelineSpec>(
          "max_frames_decoded",
          [](PipelineSpec & p) -> auto& { return Video(p).max_frames_decoded; }, 1,
          kMaxFramesDecoded, "video: frames one clip may decode (at least `clip_frames`)"),
      Number<PipelineSpec>(
          "max_duration_seconds",
          [](PipelineSpec & p) -> auto& { return Video(p).max_duration_seconds; }, kMinLimitSeconds,
          kMaxMediaDurationSeconds, "video: longer videos are bad samples"),
      Bool<PipelineSpec>(
          "autorotate", [](PipelineSpec & p) -> auto& { return Video(p).autorotate; },
          "video: apply the stream's rotation metadata"),
  });
  return kSection;
}

absl::Status ParseVideo(const YamlFields& y, const std::string& f, const YAML::Node& n,
                        PipelineSpec* p) {
  const Section<PipelineSpec>& s = VideoSection();
  TransformSpec& t = p->config.transform;
  if (t.kind != MediaKind::kVideo) {
    // Refused rather than ignored, so that a typo'd kind does not silently
    // drop them.
    return s.RefuseGroup(y, n, f, "", "is a video field; it needs `kind: video`");
  }
  VideoSpec& v = t.video;
  v.clip_start = t.mode == AugmentMode::kTrain ? ClipStart::kRandom : ClipStart::kCenter;
  if (n["frame_stride"] && n["fps"]) {
    return y.Error(f + ".fps", n["fps"], "give either `frame_stride` or `fps`, not both");
  }
  RETURN_IF_ERROR(s.ReadFields(y, n, f, p));
  if (v.max_frames_decoded < v.clip_frames) {
    return y.Error(f + ".max_frames_decoded", n["max_frames_decoded"] ? n["max_frames_decoded"] : n,
                   absl::StrCat("must be at least clip_frames (", v.clip_frames, "), got ",
                                v.max_frames_decoded));
  }
  if (t.dtype != DType::kUint8) {
    return y.Error(f + ".dtype", n["dtype"],
                   "must be uint8 for video pipelines (clips are uint8 only)");
  }
  return absl::OkStatus();
}

absl::Status ParseAudio(const YamlFields& y, const std::string& field, const YAML::Node& n,
                        TransformSpec* t) {
  AudioSpec& a = t->audio;
  if (!n) {  // all defaults: 16 kHz mono, one-second clips
    a.clip_samples = a.sample_rate;
    return absl::OkStatus();
  }
  const Section<AudioSpec>& s = AudioSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, field));
  if (n["clip_samples"] && n["clip_seconds"]) {
    return y.Error(field + ".clip_samples", n["clip_samples"],
                   "give either `clip_samples` or `clip_seconds`, not both");
  }
  RETURN_IF_ERROR(s.ReadFields(y, n, field, &a));
  if (!n["clip_samples"] && !n["clip_seconds"]) a.clip_samples = a.sample_rate;  // one second
  return absl::OkStatus();
}

std::vector<FieldDoc> AudioDocs() { return AudioSection().Docs(); }

}  // namespace conveyor::server
