#include "core/decode/transform_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace conveyor {

namespace {

bool Finite(double v) { return std::isfinite(v); }

}  // namespace

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return 1;
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
  }
  return 0;
}

std::vector<int64_t> SampleShape(const TransformSpec& spec) {
  const int64_t h = spec.output_height, w = spec.output_width;
  switch (spec.kind) {
    case MediaKind::kImage:
      return spec.layout == Layout::kNCHW ? std::vector<int64_t>{3, h, w}
                                          : std::vector<int64_t>{h, w, 3};
    case MediaKind::kVideo: {
      const int64_t t = spec.video.clip_frames;
      return spec.layout == Layout::kNCHW ? std::vector<int64_t>{t, 3, h, w}
                                          : std::vector<int64_t>{t, h, w, 3};
    }
    case MediaKind::kAudio: return {spec.audio.channels, spec.audio.clip_samples};
  }
  return {};
}

size_t SampleBytes(const TransformSpec& spec) {
  size_t n = ElementSize(spec.dtype);
  for (int64_t d : SampleShape(spec)) n *= static_cast<size_t>(d);
  return n;
}

const char* ToString(MediaKind k) {
  switch (k) {
    case MediaKind::kImage: return "image";
    case MediaKind::kVideo: return "video";
    case MediaKind::kAudio: return "audio";
  }
  return "unknown";
}

const char* ToString(ClipStart c) {
  switch (c) {
    case ClipStart::kRandom: return "random";
    case ClipStart::kCenter: return "center";
    case ClipStart::kStart: return "start";
  }
  return "unknown";
}

const char* ToString(AugmentMode m) {
  switch (m) {
    case AugmentMode::kTrain: return "train";
    case AugmentMode::kEval: return "eval";
  }
  return "unknown";
}

const char* ToString(Layout l) {
  switch (l) {
    case Layout::kNCHW: return "NCHW";
    case Layout::kNHWC: return "NHWC";
  }
  return "unknown";
}

const char* ToString(DType d) {
  switch (d) {
    case DType::kUint8: return "uint8";
    case DType::kFloat32: return "float32";
    case DType::kFloat16: return "float16";
  }
  return "unknown";
}

const char* ToString(AudioCrop c) {
  switch (c) {
    case AudioCrop::kAuto: return "auto";
    case AudioCrop::kRandom: return "random";
    case AudioCrop::kCentre: return "centre";
  }
  return "unknown";
}

const char* ToString(AudioPadding p) {
  switch (p) {
    case AudioPadding::kEnd: return "end";
    case AudioPadding::kBoth: return "both";
  }
  return "unknown";
}

namespace {

absl::Status ValidateAudioSpec(const TransformSpec& spec) {
  auto bad = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("transform spec: ", field, " ", why));
  };
  const AudioSpec& a = spec.audio;
  if (spec.dtype != DType::kFloat32) {
    return bad("dtype", absl::StrCat("must be float32 for kind audio, got ", ToString(spec.dtype)));
  }
  if (a.sample_rate < kMinAudioSampleRate || a.sample_rate > kMaxAudioSampleRate) {
    return bad("audio.sample_rate", absl::StrCat("must be in [", kMinAudioSampleRate, ", ",
                                                 kMaxAudioSampleRate, "], got ", a.sample_rate));
  }
  if (a.channels < 1 || a.channels > kMaxAudioChannels) {
    return bad("audio.channels",
               absl::StrCat("must be within [1, ", kMaxAudioChannels, "], got ", a.channels));
  }
  if (a.clip_samples < 1 || a.clip_samples > kMaxAudioClipSamples) {
    return bad("audio.clip_samples",
               absl::StrCat("must be in [1, ", kMaxAudioClipSamples, "], got ", a.clip_samples));
  }
  if (a.max_samples == 0) return bad("audio.max_samples", "must be > 0");
  if (!Finite(a.max_duration_seconds) || !(a.max_duration_seconds > 0)) {
    return bad("audio.max_duration_seconds",
               absl::StrCat("must be finite and > 0, got ", a.max_duration_seconds));
  }
  return absl::OkStatus();
}

absl::Status ValidateImageOps(const TransformSpec& spec) {
  const ImageOpsSpec& o = spec.image_ops;
  auto bad = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("transform spec: image_ops.", field, " ", why));
  };
  if (o.any() && spec.kind != MediaKind::kImage) {
    return bad("*",
               "(random crop with padding, colour jitter, blur, TrivialAugmentWide) are for "
               "image pipelines");
  }
  if (o.padding < 0 || o.padding > kMaxCropPadding) {
    return bad("padding", absl::StrCat("must be in [0, ", kMaxCropPadding, "], got ", o.padding));
  }
  if (o.padding_mode != PadMode::kConstant && o.padding_mode != PadMode::kEdge &&
      o.padding_mode != PadMode::kReflect) {
    return bad("padding_mode", "is not constant, edge or reflect");
  }
  if (o.padding_mode == PadMode::kReflect &&
      (o.padding >= spec.output_width || o.padding >= spec.output_height)) {
    return bad("padding",
               absl::StrCat("must be less than the output's sides with reflect "
                            "padding, got ",
                            o.padding, " for ", spec.output_height, "x", spec.output_width));
  }
  if (o.fill < 0 || o.fill > 255) {
    return bad("fill", absl::StrCat("must be in [0, 255], got ", o.fill));
  }
  auto probability = [&](const char* field, double p) {
    return p >= 0 && p <= 1 ? absl::OkStatus()
                            : bad(field, absl::StrCat("must be in [0, 1], got ", p));
  };
  auto range = [&](const char* field, double lo, double hi, double min, double max) {
    if (Finite(lo) && Finite(hi) && lo >= min && lo <= hi && hi <= max) return absl::OkStatus();
    return bad(field, absl::StrCat("must satisfy ", min, " <= min <= max <= ", max, ", got ", lo,
                                   ", ", hi));
  };
  if (absl::Status s = probability("jitter_probability", o.jitter_probability); !s.ok()) return s;
  if (absl::Status s = range("brightness", o.brightness_min, o.brightness_max, 0, 1e6); !s.ok()) {
    return s;
  }
  if (absl::Status s = range("contrast", o.contrast_min, o.contrast_max, 0, 1e6); !s.ok()) {
    return s;
  }
  if (absl::Status s = range("saturation", o.saturation_min, o.saturation_max, 0, 1e6); !s.ok()) {
    return s;
  }
  if (absl::Status s = range("hue", o.hue_min, o.hue_max, -0.5, 0.5); !s.ok()) return s;
  if (absl::Status s = probability("blur_probability", o.blur_probability); !s.ok()) return s;
  if (o.blur()) {
    auto side = [&](const char* field, int k, int out) {
      if (k >= 1 && k % 2 == 1 && k / 2 < out) return absl::OkStatus();
      return bad(field, absl::StrCat("must be odd, >= 1 and at most 2 x the output side - 1 (",
                                     2 * out - 1, "), got ", k));
    };
    if (absl::Status s = side("blur_kernel_width", o.blur_kernel_width, spec.output_width);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = side("blur_kernel_height", o.blur_kernel_height, spec.output_height);
        !s.ok()) {
      return s;
    }
    if (!(o.blur_sigma_min > 0)) {
      return bad("blur_sigma", absl::StrCat("must be > 0, got ", o.blur_sigma_min));
    }
    if (absl::Status s = range("blur_sigma", o.blur_sigma_min, o.blur_sigma_max, 0, 1e6); !s.ok()) {
      return s;
    }
  }
  if (o.trivial_augment_bins < 0 || o.trivial_augment_bins == 1 ||
      o.trivial_augment_bins > kMaxTrivialAugmentBins) {
    return bad("trivial_augment_bins",
               absl::StrCat("must be 0 (off) or in [2, ", kMaxTrivialAugmentBins, "], got ",
                            o.trivial_augment_bins));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTransformSpec(const TransformSpec& spec) {
  auto bad = [](const char* field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("transform spec: ", field, " ", why));
  };
  if (spec.mode != AugmentMode::kTrain && spec.mode != AugmentMode::kEval) {
    return bad("mode", "is not train or eval");
  }
  if (spec.layout != Layout::kNCHW && spec.layout != Layout::kNHWC) {
    return bad("layout", "is not NCHW or NHWC");
  }
  if (ElementSize(spec.dtype) == 0) return bad("dtype", "is not uint8, float32 or float16");
  if (spec.kind != MediaKind::kImage && spec.kind != MediaKind::kVideo &&
      spec.kind != MediaKind::kAudio) {
    return bad("kind", "is not image, video or audio");
  }
  if (spec.output_height <= 0 || spec.output_height > kMaxOutputSide) {
    return bad("output_height",
               absl::StrCat("must be in [1, ", kMaxOutputSide, "], got ", spec.output_height));
  }
  if (spec.output_width <= 0 || spec.output_width > kMaxOutputSide) {
    return bad("output_width",
               absl::StrCat("must be in [1, ", kMaxOutputSide, "], got ", spec.output_width));
  }
  for (int c = 0; c < 3; ++c) {
    if (!Finite(spec.mean[c])) return bad("mean", absl::StrCat("[", c, "] is not finite"));
    if (!Finite(spec.std[c]) || !(spec.std[c] > 0)) {
      return bad("std", absl::StrCat("[", c, "] must be finite and > 0, got ", spec.std[c]));
    }
  }
  if (!Finite(spec.scale_min) || !Finite(spec.scale_max) || !(spec.scale_min > 0) ||
      !(spec.scale_min <= spec.scale_max)) {
    return bad("scale_min/scale_max", absl::StrCat("must satisfy 0 < scale_min <= scale_max, got ",
                                                   spec.scale_min, ", ", spec.scale_max));
  }
  if (!Finite(spec.ratio_min) || !Finite(spec.ratio_max) || !(spec.ratio_min > 0) ||
      !(spec.ratio_min <= spec.ratio_max)) {
    return bad("ratio_min/ratio_max", absl::StrCat("must satisfy 0 < ratio_min <= ratio_max, got ",
                                                   spec.ratio_min, ", ", spec.ratio_max));
  }
  if (!(spec.flip_probability >= 0 && spec.flip_probability <= 1)) {
    return bad("flip_probability", absl::StrCat("must be in [0, 1], got ", spec.flip_probability));
  }
  if (!(spec.vflip_probability >= 0 && spec.vflip_probability <= 1)) {
    return bad("vflip_probability",
               absl::StrCat("must be in [0, 1], got ", spec.vflip_probability));
  }
  if (!(spec.grayscale_probability >= 0 && spec.grayscale_probability <= 1)) {
    return bad("grayscale_probability",
               absl::StrCat("must be in [0, 1], got ", spec.grayscale_probability));
  }
  if (spec.kind != MediaKind::kImage &&
      (spec.vflip_probability > 0 || spec.grayscale_probability > 0)) {
    return bad("vflip_probability/grayscale_probability", "are for image pipelines");
  }
  if (spec.resize_size <= 0 || spec.resize_size > kMaxOutputSide) {
    return bad("resize_size",
               absl::StrCat("must be in [1, ", kMaxOutputSide, "], got ", spec.resize_size));
  }
  if (spec.mode == AugmentMode::kEval &&
      (spec.resize_size < spec.output_height || spec.resize_size < spec.output_width)) {
    // torchvision would pad the centre crop; Conveyor does not pad.
    return bad("resize_size",
               absl::StrCat("must be >= output size in eval mode (no padding), got ",
                            spec.resize_size, " < ", spec.output_height, "x", spec.output_width));
  }
  if (spec.max_pixels == 0) return bad("max_pixels", "must be > 0");
  if (spec.max_decode_memory < kMinDecodeMemory) {
    return bad("max_decode_memory", absl::StrCat("must be at least ", kMinDecodeMemory,
                                                 " bytes, got ", spec.max_decode_memory));
  }
  if (!Finite(spec.max_decode_seconds) || !(spec.max_decode_seconds > 0) ||
      spec.max_decode_seconds > kMaxDecodeSeconds) {
    return bad("max_decode_seconds", absl::StrCat("must be in (0, ", kMaxDecodeSeconds, "], got ",
                                                  spec.max_decode_seconds));
  }
  if (spec.kind == MediaKind::kVideo) {
    const VideoSpec& v = spec.video;
    if (spec.dtype != DType::kUint8) {
      return bad("dtype", "must be uint8 for video pipelines (clips are uint8 only)");
    }
    if (v.clip_frames < 1 || v.clip_frames > kMaxClipFrames) {
      return bad("clip_frames",
                 absl::StrCat("must be in [1, ", kMaxClipFrames, "], got ", v.clip_frames));
    }
    if (v.frame_stride < 1 || v.frame_stride > kMaxFrameStride) {
      return bad("frame_stride",
                 absl::StrCat("must be in [1, ", kMaxFrameStride, "], got ", v.frame_stride));
    }
    if (!Finite(v.fps) || v.fps < 0 || v.fps > kMaxClipFps) {
      return bad("fps", absl::StrCat("must be 0 (use frame_stride) or in (0, ", kMaxClipFps,
                                     "], got ", v.fps));
    }
    if (v.fps > 0 && v.frame_stride != 1) {
      return bad("fps", "and frame_stride exclude each other; give one");
    }
    if (v.clip_start != ClipStart::kRandom && v.clip_start != ClipStart::kCenter &&
        v.clip_start != ClipStart::kStart) {
      return bad("clip_start", "is not random, center or start");
    }
    if (v.max_frames_decoded < v.clip_frames || v.max_frames_decoded > (1 << 24)) {
      return bad("max_frames_decoded",
                 absl::StrCat("must be in [clip_frames (", v.clip_frames, "), ", 1 << 24, "], got ",
                              v.max_frames_decoded));
    }
    if (!Finite(v.max_duration_seconds) || !(v.max_duration_seconds > 0) ||
        v.max_duration_seconds > 1e7) {
      return bad("max_duration_seconds",
                 absl::StrCat("must be in (0, 1e7], got ", v.max_duration_seconds));
    }
  }
  if (absl::Status s = ValidateImageOps(spec); !s.ok()) return s;
  if (spec.kind == MediaKind::kAudio) return ValidateAudioSpec(spec);
  return absl::OkStatus();
}

const char* RandomDraws(const TransformSpec& spec) {
  switch (spec.kind) {
    case MediaKind::kImage:
      if (spec.mode == AugmentMode::kTrain) return "augment: train draws a random crop and flip";
      if (spec.image_ops.any()) {
        return "random_crop, color_jitter, gaussian_blur and trivial_augment_wide draw their "
               "parameters";
      }
      return spec.vflip_probability > 0 || spec.grayscale_probability > 0
                 ? "vertical_flip and grayscale draw whether to apply"
                 : nullptr;
    case MediaKind::kVideo:
      if (spec.mode == AugmentMode::kTrain) {
        return "augment: train draws a random crop and flip of each clip";
      }
      return spec.video.clip_start == ClipStart::kRandom
                 ? "clip_start: random draws the clip's start"
                 : nullptr;
    case MediaKind::kAudio:
      if (spec.audio.crop == AudioCrop::kRandom ||
          (spec.audio.crop == AudioCrop::kAuto && spec.mode == AugmentMode::kTrain)) {
        return "audio.crop: random (or auto with augment: train) draws the clip's start";
      }
      return nullptr;
  }
  return "an unknown kind";
}

}  // namespace conveyor
