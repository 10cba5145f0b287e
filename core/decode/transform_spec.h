// What a pipeline does to each sample after decoding: the augmentation mode,
// output geometry, layout and element type. A plain value, validated once
// (ValidateTransformSpec) and const afterwards; safe to share across threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/base/media_kind.h"

namespace conveyor {

enum class AugmentMode {
  kTrain,  // RandomResizedCrop + random horizontal flip (torchvision's rules)
  kEval,   // resize shorter side to resize_size, centre crop output size
};

enum class Layout { kNCHW, kNHWC };

// Where a video clip starts (kind video): drawn from the sample's Rng
// (kRandom, uniform over the valid starts), the middle clip (kCenter), or the
// first frame (kStart). The latter two draw nothing.
enum class ClipStart { kRandom, kCenter, kStart };

// Video clips (kind video): the decoder's parameters (core/decode/video_clip_decoder.h).
struct VideoSpec {
  int clip_frames = 16;  // T: frames per clip
  // Every frame_stride-th frame (in presentation order), used when fps is 0.
  int frame_stride = 1;
  // > 0: sample at this rate by timestamps (variable frame rate safe): clip
  // frame k is the frame shown at start + k / fps.
  double fps = 0;
  ClipStart clip_start = ClipStart::kRandom;
  // Limits against hostile media (each beyond: an error of the sample).
  // Frames decoded for one clip, the ones before it since the keyframe
  // included.
  int max_frames_decoded = 1024;
  // The video's length, from its timestamps.
  double max_duration_seconds = 4 * 3600.0;
  // Apply the stream's rotation metadata (display matrix) as ffmpeg does by
  // default; false: frames as stored (ffmpeg -noautorotate).
  bool autorotate = true;
  bool operator==(const VideoSpec&) const = default;
};

// Bounds of the video fields (ValidateTransformSpec, the config).
inline constexpr int kMaxClipFrames = 4096;
inline constexpr int kMaxFrameStride = 4096;
inline constexpr double kMaxClipFps = 1000;

// Where an audio clip's window lies in the decoded (resampled) stream.
enum class AudioCrop {
  kAuto,    // kRandom in train, kCentre in eval
  kRandom,  // start uniform in [0, N - L] from the sample's Rng
  kCentre,  // start (N - L) / 2, rounded down
};
// Where the zeros of a clip shorter than L go.
enum class AudioPadding {
  kEnd,   // the samples first, zeros after them
  kBoth,  // centred: floor(pad / 2) zeros before, the rest after
};

// Audio clips (kind audio): the decoder's parameters (core/decode/audio_clip_decoder.h).
struct AudioSpec {
  int sample_rate = 16000;       // resampled to this (Hz)
  int channels = 1;              // C: mixed or upmixed to this many channels (1 or 2)
  int64_t clip_samples = 16000;  // L: samples per channel of one clip
  AudioCrop crop = AudioCrop::kAuto;
  AudioPadding padding = AudioPadding::kEnd;
  // Limits against hostile files; beyond either the sample fails.
  // Samples per channel decoded (at the file's rate) or resampled (at
  // sample_rate), whichever is larger.
  uint64_t max_samples = uint64_t{1} << 24;
  // Seconds of audio: the duration a file declares, then what it decodes to.
  double max_duration_seconds = 3600;
  bool operator==(const AudioSpec&) const = default;
};
// Bounds of the audio fields (ValidateTransformSpec).
inline constexpr int kMaxAudioChannels = 2;
inline constexpr int kMinAudioSampleRate = 1000;
inline constexpr int kMaxAudioSampleRate = 384000;
inline constexpr int64_t kMaxAudioClipSamples = int64_t{1} << 24;
enum class DType { kUint8, kFloat32, kFloat16 };

// How torchvision's RandomCrop(padding=...) fills what lies beyond the image.
enum class PadMode {
  kConstant,  // `fill` in every channel
  kEdge,      // the nearest edge pixel
  kReflect,   // mirrored without repeating the edge (torch's reflect)
};

// Per-image ops of image pipelines that act on the whole resized image, each
// with torchvision's semantics on a PIL image (core/decode/color_ops.h,
// core/decode/affine_ops.h), applied after the crop/resize and the flips in
// this order: random crop with padding, colour jitter, grayscale, Gaussian
// blur, TrivialAugmentWide. Each is drawn from the sample's Rng only when it
// is on, so pipelines without them draw what they always drew. A plain
// value.
struct ImageOpsSpec {
  // RandomCrop(size = output size, padding): the resized image padded by
  // `padding` on every side, then an output-sized window at a uniform offset
  // in [0, 2 × padding] on each axis. 0: off.
  int padding = 0;
  PadMode padding_mode = PadMode::kConstant;
  int fill = 0;  // kConstant: 0..255
  // RandomApply(ColorJitter(...), p = jitter_probability): each factor drawn
  // uniformly in its range, the four applied in a drawn order. A factor whose
  // range is the identity ({1, 1}, hue {0, 0}) is neither drawn nor applied.
  double jitter_probability = 0;  // 0: off
  double brightness_min = 1, brightness_max = 1;
  double contrast_min = 1, contrast_max = 1;
  double saturation_min = 1, saturation_max = 1;
  double hue_min = 0, hue_max = 0;  // within [-0.5, 0.5]
  // RandomApply(GaussianBlur(kernel, sigma), p = blur_probability): sigma
  // uniform in [sigma_min, sigma_max], the same on both axes. Odd kernel
  // sides, each at most 2 × the output side − 1 (torch's reflect padding).
  double blur_probability = 0;  // 0: off
  int blur_kernel_width = 0, blur_kernel_height = 0;
  double blur_sigma_min = 0.1, blur_sigma_max = 2.0;
  // TrivialAugmentWide(num_magnitude_bins = trivial_augment_bins,
  // NEAREST, fill 0). 0: off.
  int trivial_augment_bins = 0;

  bool jitter() const { return jitter_probability > 0; }
  bool blur() const { return blur_probability > 0; }
  bool trivial_augment() const { return trivial_augment_bins > 0; }
  // Whether any op is on (the transform then keeps the whole resized image).
  bool any() const { return padding > 0 || jitter() || blur() || trivial_augment(); }
  bool operator==(const ImageOpsSpec&) const = default;
};
// Bounds of the ops' fields (ValidateTransformSpec).
inline constexpr int kMaxCropPadding = 4096;
inline constexpr int kMaxTrivialAugmentBins = 1024;

struct TransformSpec {
  MediaKind kind = MediaKind::kImage;
  AugmentMode mode = AugmentMode::kTrain;
  int output_height = 224;
  int output_width = 224;
  Layout layout = Layout::kNCHW;
  DType dtype = DType::kUint8;
  // Per-channel normalisation applied for float outputs: (x/255 - mean)/std.
  std::array<float, 3> mean = {0.485f, 0.456f, 0.406f};
  std::array<float, 3> std = {0.229f, 0.224f, 0.225f};
  // RandomResizedCrop parameters (train).
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double flip_probability = 0.5;
  // Images (either mode), after the crop and resize: torchvision's
  // RandomVerticalFlip and RandomGrayscale (PIL's convert("L"), as three
  // equal channels). Drawn after the horizontal flip, in this order, only
  // when above 0 (so the presets draw what they always drew).
  double vflip_probability = 0;
  double grayscale_probability = 0;
  // Whole-image ops after those (see ImageOpsSpec).
  ImageOpsSpec image_ops;
  // Eval: the shorter side is resized to this before the centre crop.
  int resize_size = 256;
  // Use libjpeg's DCT-domain scaling (1/2, 1/4, 1/8) when the crop stays at
  // least the output size after scaling.
  bool dct_scaling = true;
  // Images with more pixels than this are refused before any allocation.
  uint64_t max_pixels = 64ull * 1024 * 1024;
  // What decoding one image may cost a worker (JpegDecoder's DecodeLimits):
  // working memory, judged from the header before libjpeg allocates it (a
  // progressive file needs 128 bytes per 8x8 block of every component, so a
  // progressive 4:2:0 image of up to about 40 megapixels fits the default),
  // and CPU seconds of the worker thread. Either exceeded is a bad sample.
  uint64_t max_decode_memory = 128ull << 20;
  double max_decode_seconds = 2.0;
  // Kind-specific parameters (used only by their kind).
  VideoSpec video;
  AudioSpec audio;
};

// Largest output side (height, width, resize_size) accepted; far above any
// training resolution, small enough that sizes and byte counts never
// overflow.
inline constexpr int kMaxOutputSide = 16384;

// Smallest max_decode_memory accepted: every image needs some row buffers.
inline constexpr uint64_t kMinDecodeMemory = 1ull << 20;
// Largest max_decode_seconds accepted.
inline constexpr double kMaxDecodeSeconds = 3600;

// The shape of one output sample (see MediaKind).
std::vector<int64_t> SampleShape(const TransformSpec& spec);
// Bytes of one output sample: the product of SampleShape times the element size.
size_t SampleBytes(const TransformSpec& spec);
size_t ElementSize(DType dtype);

const char* ToString(MediaKind k);  // "image", "video", "audio"
const char* ToString(ClipStart c);  // "random", "center", "start"
const char* ToString(AugmentMode m);
const char* ToString(Layout l);
const char* ToString(DType d);
const char* ToString(AudioCrop c);     // "auto", "random", "centre"
const char* ToString(AudioPadding p);  // "end", "both"

// Returns InvalidArgument naming the bad field, or OK.
absl::Status ValidateTransformSpec(const TransformSpec& spec);

// What `spec` draws from a sample's Rng, in words ("augment: train draws a
// random crop and flip"), or nullptr when it draws nothing, so that a sample's
// output depends only on its bytes and the spec (every epoch alike): images in
// eval mode; video in eval mode with clip_start center or start; audio whose
// effective crop is centre (audio.crop centre, or auto with eval).
const char* RandomDraws(const TransformSpec& spec);

}  // namespace conveyor
