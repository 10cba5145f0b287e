// AudioClipDecoder: the decoder of `kind: audio` pipelines. Turns one audio
// file's bytes (any container and codec Debian's FFmpeg 5.1 demuxes and
// decodes: WAV with PCM, FLAC, MP3, Ogg Opus/Vorbis, AAC in ADTS or MP4, …;
// chosen by content, never by name) into a float32 clip [C, L] in its place
// in the batch slot.
//
// The clip, defined on the *whole* file (what `ffmpeg -i FILE -ar R -f f32le`
// writes, with the channel rules below): the file's first audio stream is
// decoded from its first sample to its last and resampled by libswresample
// (FFmpeg's defaults) to spec.audio.sample_rate, giving N samples per
// channel. When N >= L the clip is the window [s, s + L): s drawn uniformly
// from [0, N - L] with the sample's Rng (crop random: train by default), or
// (N - L) / 2 rounded down (crop centre: eval by default). When N < L the N
// samples are followed by L - N zeros (padding end) or centred between
// floor((L - N) / 2) zeros and the rest (padding both); the clip's valid
// length is not sent with the batch (see config/README.md).
//
// Channels: to 1 channel, the mean of the file's channels (stereo:
// (L + R) / 2); to 2 channels, mono is copied to both, stereo kept, and more
// channels are mixed down by FFmpeg's standard matrix (centre and surround at
// -3 dB, LFE dropped).
//
// Seeking: when every packet decodes on its own (PCM in WAV, FLAC in a .flac
// stream: AV_CODEC_PROP_INTRA_ONLY) and the header gives the exact length,
// the decoder computes N from it, seeks to a point before the window (on the
// resampler's phase grid, far enough back to fill its filter) and decodes
// only from there, placing samples by their pts; the result equals the whole
// decode sample for sample. Anything unexpected (no pts, a gap, a stream
// shorter than its header) falls back to the whole decode. Lossy codecs
// (MP3, AAC, Opus, Vorbis) always decode from the start: after a seek their
// first frames differ (overlap, bit reservoir, filter state), and raw MP3
// seeks by byte estimates, so a seek would not be exact.
//
// Limits (errors of the sample, ResourceExhausted / DeadlineExceeded /
// InvalidArgument, never an OOM or a hang): spec.audio.max_samples samples
// per channel decoded or resampled, spec.audio.max_duration_seconds declared
// or decoded, input rates more than 1024x below the output rate, the
// resampler's filter bank and buffers (estimated from the rates and input
// channels, from the header and again from the first frame, before
// libswresample is set up) against spec.max_decode_memory, and
// spec.max_decode_seconds of this thread's CPU time for the whole sample
// (core/decode/ffmpeg/decode_budget.h: checked by the demuxer's interrupt callback and
// reader and between packets; a wall-clock backstop at 10x the budget).
//
// FFmpeg's own threading is off (one decode per worker thread).
//
// The resampler is fed at most 16384 samples (in or out) per swr_convert
// call: libswresample sizes its intermediate buffers, for every input
// channel when it resamples before mixing, to one call.
//
// Thread-safety: one instance per worker thread (SampleDecoder's contract).
// It keeps its frame, packet, resampler and output buffers between samples
// (an output buffer over 16 MiB a channel and a resampler over 8 MiB are
// freed after their sample).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/decode/ffmpeg/handles.h"
#include "core/decode/sample_decoder.h"

namespace conveyor {

class AudioClipDecoder final : public SampleDecoder {
 public:
  // What the last Run did; for tests and tools.
  struct Trace {
    int input_sample_rate = 0;
    int input_channels = 0;
    int64_t decoded_samples = -1;  // N at spec.sample_rate (-1: not known, seek path)
    int64_t total_samples = 0;     // N as used to place the window
    int64_t crop_start = 0;        // s
    int64_t valid_samples = 0;     // min(N, L)
    bool seeked = false;           // the seek path produced the clip
  };

  AudioClipDecoder();
  ~AudioClipDecoder() override;

  // REQUIRES: spec.kind == kAudio, ValidateTransformSpec(spec).ok().
  absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                   uint8_t* out) override;

  const Trace& trace() const { return trace_; }

 private:
  struct Source;
  struct ResamplerKey {
    int in_rate = 0;
    int in_format = -1;
    AVChannelLayout in_layout{};
    int out_rate = 0;
    int out_channels = 0;
  };

  // Whether the seek path is exact for this file (see the header comment).
  static bool SeeksExactly(const Source& source);
  // The seek path; Aborted when it is not exact here after all.
  absl::Status RunSeeking(const TransformSpec& spec, Source* source, Rng rng, float* out);
  absl::Status RunWhole(const TransformSpec& spec, Source* source, Rng rng, float* out);
  absl::Status OpenSource(std::span<const uint8_t> bytes, const TransformSpec& spec,
                          Source* source);
  void StartSample(const TransformSpec& spec);
  // Decodes from the source's current position and feeds the resampler
  // from input sample `feed_from` on (samples before it are dropped, frames
  // placed by pts; -1: feed everything in order) until `want` output
  // samples are buffered (-1: to the end). Sets *complete when the stream
  // ended and the resampler was flushed.
  absl::Status Pump(const TransformSpec& spec, Source* source, int64_t feed_from, int64_t want,
                    bool* complete);
  absl::Status Feed(const TransformSpec& spec, const AVFrame* frame, int offset);
  absl::Status FeedChunk(const TransformSpec& spec, const AVFrame* frame, int offset, int n);
  absl::Status Flush(const TransformSpec& spec);
  absl::Status SetUpResampler(const TransformSpec& spec, const AVFrame* frame);
  absl::Status Reserve(const TransformSpec& spec, int64_t more);
  // Writes the clip: `valid` buffered samples from buffer index `from`, padded.
  void WriteClip(const TransformSpec& spec, int64_t from, int64_t valid, float* out);

  AvFramePtr frame_;
  AvPacketPtr packet_;
  SwrContextPtr swr_;
  ResamplerKey swr_key_;
  bool swr_ready_ = false;                  // swr_ configured for this sample's input
  std::vector<std::vector<float>> planes_;  // resampled output, one per channel
  int64_t buffered_ = 0;                    // samples per channel in planes_
  int64_t decoded_in_ = 0;                  // input samples per channel decoded this sample
  Trace trace_;
};

}  // namespace conveyor
