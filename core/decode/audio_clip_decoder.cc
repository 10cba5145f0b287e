#include "core/decode/audio_clip_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/decode/ffmpeg/error.h"
#include "core/decode/ffmpeg/memory_input.h"

extern "C" {
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/samplefmt.h>
}

namespace conveyor {
namespace {

// swr's filter_size default; the seek margin is derived from it.
constexpr int kSwrFilterSize = 32;
// Output buffers larger than this (per channel) are freed after their sample.
constexpr size_t kKeptPlaneFloats = size_t{4} << 20;
// A resampler (ResamplerBytes) larger than this is freed after its sample.
constexpr uint64_t kKeptResamplerBytes = uint64_t{8} << 20;
// Most input channels libswresample mixes (SWR_CH_MAX).
constexpr int kMaxInputChannels = 64;
// Most output samples per input sample (upsampling ratio): 16 Hz at least
// for 16 kHz, 375 Hz for 384 kHz.
constexpr int64_t kMaxUpsampling = 1024;
// Samples (per channel, in or out) handed to one swr_convert call at most:
// libswresample sizes its intermediate buffers (all input channels when it
// resamples before mixing) to one call's output.
constexpr int64_t kChunkSamples = 16384;

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// What libswresample allocates to resample `channels` channels of `in_rate`
// Hz to `out_rate`, one call at a time (kChunkSamples): its filter bank
// (ceil(32 / (0.97 * min(1, out / in))) taps, rounded up to 8, for up to 1025
// phases, 8-byte elements at most) and, for every input channel, four
// buffers of a call's samples plus the filter's history.
uint64_t ResamplerBytes(int64_t in_rate, int channels, int64_t out_rate) {
  const double factor = std::min(1.0, 0.97 * static_cast<double>(out_rate) / in_rate);
  const double taps = std::ceil(kSwrFilterSize / factor);
  if (!(taps < 1e12)) return UINT64_MAX;
  const auto length = (static_cast<uint64_t>(taps) + 7) / 8 * 8;
  const uint64_t bank = length * 1025 * 8;
  const uint64_t buffers = uint64_t(channels) * 8 * (4 * uint64_t(kChunkSamples) + length);
  return bank + buffers;
}

// Refuses input rates and channel counts the resampler would need too much
// memory (or absurd ratios) for, before it is built.
absl::Status CheckResampling(const TransformSpec& spec, int64_t in_rate, int channels) {
  const int64_t out_rate = spec.audio.sample_rate;
  if (in_rate <= 0 || channels <= 0) return absl::OkStatus();  // checked where they are used
  if (in_rate * kMaxUpsampling < out_rate) {
    return absl::InvalidArgumentError(absl::StrCat(
        "audio: a sample rate of ", in_rate, " Hz is too low to resample to ", out_rate,
        " Hz (at most ", kMaxUpsampling, " output samples per input sample)"));
  }
  const uint64_t need = ResamplerBytes(in_rate, channels, out_rate);
  if (need > spec.max_decode_memory) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "audio: resampling %d channels from %d Hz to %d Hz needs about %.1f MiB, more than "
        "max_decode_memory (%.1f MiB)",
        channels, in_rate, out_rate, Mib(need), Mib(spec.max_decode_memory)));
  }
  return absl::OkStatus();
}

// The seek path's way of saying "not exact here; decode the whole file".
// Never leaves this file.
absl::Status NotExact(absl::string_view why) { return absl::AbortedError(why); }

absl::Status OverTime(const TransformSpec& spec) {
  return absl::DeadlineExceededError(
      absl::StrCat("audio: decoding took more than max_decode_seconds (", spec.max_decode_seconds,
                   " s of CPU)"));
}

int64_t MulDivFloor(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<__int128>(a) * b / c);
}
int64_t MulDivCeil(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>((static_cast<__int128>(a) * b + c - 1) / c);
}

AudioCrop EffectiveCrop(const TransformSpec& spec) {
  if (spec.audio.crop != AudioCrop::kAuto) return spec.audio.crop;
  return spec.mode == AugmentMode::kTrain ? AudioCrop::kRandom : AudioCrop::kCentre;
}

// The window's start in a stream of n samples (see the header).
int64_t AudioWindowStart(const TransformSpec& spec, int64_t n, Rng& rng) {
  const int64_t l = spec.audio.clip_samples;
  if (n <= l) return 0;
  if (EffectiveCrop(spec) == AudioCrop::kRandom) {
    return static_cast<int64_t>(rng.Below(static_cast<uint64_t>(n - l + 1)));
  }
  return (n - l) / 2;
}

bool SameLayout(const AVChannelLayout& a, const AVChannelLayout& b) {
  return av_channel_layout_compare(&a, &b) == 0;
}

}  // namespace

// One opened file: its demuxer, the chosen audio stream and its decoder.
struct AudioClipDecoder::Source {
  std::unique_ptr<AvMemoryInput> input;
  int stream_index = -1;
  AVStream* stream = nullptr;
  AvCodecContextPtr codec;
  // Each stream's duration as its header declared it (before any probing
  // estimated one); 0 when it declared none.
  std::vector<int64_t> header_durations;
  bool eof_sent = false;  // the decoder was sent its drain packet
  int64_t next_pos = -1;  // seek path: where the next frame must start
  AvDecodeBudget budget;
};

AudioClipDecoder::AudioClipDecoder() : frame_(av_frame_alloc()), packet_(av_packet_alloc()) {}

AudioClipDecoder::~AudioClipDecoder() { av_channel_layout_uninit(&swr_key_.in_layout); }

absl::Status AudioClipDecoder::OpenSource(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                          Source* s) {
  AvMemoryInput::Options options;
  options.budget = s->budget;
  ASSIGN_OR_RETURN(s->input, AvMemoryInput::Open(bytes, "audio", options));
  AVFormatContext* fmt = s->input->format();
  bool need_probe = (fmt->ctx_flags & AVFMTCTX_NOHEADER) != 0 || fmt->nb_streams == 0;
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const AVCodecParameters* p = fmt->streams[i]->codecpar;
    if (p->codec_type == AVMEDIA_TYPE_AUDIO &&
        (p->sample_rate <= 0 || p->ch_layout.nb_channels <= 0)) {
      need_probe = true;
    }
  }
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    const int64_t d = fmt->streams[i]->duration;
    s->header_durations.push_back(d == AV_NOPTS_VALUE ? 0 : d);
  }
  if (need_probe) {
    if (const int rc = avformat_find_stream_info(fmt, nullptr); rc < 0) {
      return AvError(rc, "audio: reading the stream parameters");
    }
    // An interrupted probe may return early with what it had.
    if (s->input->budget_spent()) return OverTime(spec);
  }
  const AVCodec* codec = nullptr;
  s->stream_index = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
  if (s->stream_index == AVERROR_STREAM_NOT_FOUND) {
    return absl::InvalidArgumentError(
        absl::StrCat("audio: no audio stream in this ", fmt->iformat->name, " file"));
  }
  if (s->stream_index < 0) return AvError(s->stream_index, "audio: no decodable audio stream");
  for (unsigned i = 0; i < fmt->nb_streams; ++i) {
    if (static_cast<int>(i) != s->stream_index) fmt->streams[i]->discard = AVDISCARD_ALL;
  }
  s->stream = fmt->streams[s->stream_index];
  const AVCodecParameters* par = s->stream->codecpar;
  if (par->ch_layout.nb_channels > kMaxInputChannels) {
    return absl::InvalidArgumentError(absl::StrCat("audio: ", par->ch_layout.nb_channels,
                                                   " channels (at most ", kMaxInputChannels,
                                                   " are mixed)"));
  }
  RETURN_IF_ERROR(CheckResampling(spec, par->sample_rate, par->ch_layout.nb_channels));
  // The declared duration, before anything is decoded.
  double declared = -1;
  if (s->stream->duration > 0) {
    declared = static_cast<double>(s->stream->duration) * av_q2d(s->stream->time_base);
  } else if (fmt->duration > 0) {
    declared = static_cast<double>(fmt->duration) / AV_TIME_BASE;
  }
  if (declared > spec.audio.max_duration_seconds) {
    return absl::ResourceExhaustedError(absl::StrCat("audio: the file declares ", declared,
                                                     " s, more than max_duration_seconds (",
                                                     spec.audio.max_duration_seconds, " s)"));
  }
  s->codec.reset(avcodec_alloc_context3(codec));
  if (s->codec == nullptr) return AvError(AVERROR(ENOMEM), "audio: decoder");
  if (const int rc = avcodec_parameters_to_context(s->codec.get(), par); rc < 0) {
    return AvError(rc, "audio: decoder parameters");
  }
  s->codec->thread_count = 1;  // one decode per worker thread
  s->codec->pkt_timebase = s->stream->time_base;
  if (const int rc = avcodec_open2(s->codec.get(), codec, nullptr); rc < 0) {
    return AvError(rc, absl::StrCat("audio: opening the ", codec->name, " decoder"));
  }
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::SetUpResampler(const TransformSpec& spec, const AVFrame* frame) {
  AVChannelLayout in_layout{};
  if (frame->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC) {
    av_channel_layout_default(&in_layout, frame->ch_layout.nb_channels);
  } else if (const int rc = av_channel_layout_copy(&in_layout, &frame->ch_layout); rc < 0) {
    return AvError(rc, "audio: channel layout");
  }
  const int in_channels = in_layout.nb_channels;
  if (in_channels < 1 || in_channels > kMaxInputChannels || frame->sample_rate <= 0) {
    av_channel_layout_uninit(&in_layout);
    return absl::InvalidArgumentError(absl::StrCat("audio: decoded frames have ", in_channels,
                                                   " channels at ", frame->sample_rate, " Hz"));
  }
  if (absl::Status st = CheckResampling(spec, frame->sample_rate, in_channels); !st.ok()) {
    av_channel_layout_uninit(&in_layout);
    return st;
  }
  const int out_channels = spec.audio.channels;
  const bool same =
      swr_ != nullptr && swr_key_.in_rate == frame->sample_rate &&
      swr_key_.in_format == frame->format && SameLayout(swr_key_.in_layout, in_layout) &&
      swr_key_.out_rate == spec.audio.sample_rate && swr_key_.out_channels == out_channels;
  if (same) {
    av_channel_layout_uninit(&in_layout);
    // Re-initialising clears the state of the last sample; the filter bank
    // (same rates) is kept.
    if (const int rc = swr_init(swr_.get()); rc < 0) return AvError(rc, "audio: resampler");
    swr_ready_ = true;
    return absl::OkStatus();
  }
  swr_.reset();
  av_channel_layout_uninit(&swr_key_.in_layout);
  swr_key_ = ResamplerKey{};
  AVChannelLayout out_layout{};
  av_channel_layout_default(&out_layout, out_channels);
  SwrContext* raw = nullptr;
  int rc = swr_alloc_set_opts2(&raw, &out_layout, AV_SAMPLE_FMT_FLTP, spec.audio.sample_rate,
                               &in_layout, static_cast<AVSampleFormat>(frame->format),
                               frame->sample_rate, 0, nullptr);
  SwrContextPtr swr(raw);
  av_channel_layout_uninit(&out_layout);
  if (rc < 0) {
    av_channel_layout_uninit(&in_layout);
    return AvError(rc, "audio: resampler");
  }
  // Our channel rules where they differ from FFmpeg's (which scales mono to
  // stereo and stereo to mono by 1/sqrt(2)): mono is copied, a mix to mono
  // is the mean.
  std::vector<double> matrix;
  if (out_channels == 1 && in_channels > 1) {
    matrix.assign(in_channels, 1.0 / in_channels);
  } else if (out_channels == 2 && in_channels == 1) {
    matrix.assign(2, 1.0);
  }
  if (!matrix.empty()) {
    rc = swr_set_matrix(swr.get(), matrix.data(), in_channels);
    if (rc < 0) {
      av_channel_layout_uninit(&in_layout);
      return AvError(rc, "audio: mixing matrix");
    }
  }
  if (rc = swr_init(swr.get()); rc < 0) {
    av_channel_layout_uninit(&in_layout);
    return AvError(rc, "audio: resampler");
  }
  swr_ = std::move(swr);
  swr_key_.in_rate = frame->sample_rate;
  swr_key_.in_format = frame->format;
  swr_key_.in_layout = in_layout;  // owned by swr_key_ from here
  swr_key_.out_rate = spec.audio.sample_rate;
  swr_key_.out_channels = out_channels;
  swr_ready_ = true;
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::Reserve(const TransformSpec& spec, int64_t more) {
  const int64_t need = buffered_ + more;
  if (need > static_cast<int64_t>(spec.audio.max_samples) + more) {
    return absl::ResourceExhaustedError(absl::StrCat("audio: resampled to more than max_samples (",
                                                     spec.audio.max_samples,
                                                     ") samples per channel"));
  }
  for (auto& plane : planes_) {
    if (static_cast<int64_t>(plane.size()) < need) {
      // Doubling, but never past what max_samples lets the sample reach.
      const auto cap = static_cast<size_t>(spec.audio.max_samples) + static_cast<size_t>(more);
      plane.resize(std::min(std::max<size_t>(static_cast<size_t>(need), plane.size() * 2), cap));
    }
  }
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::Feed(const TransformSpec& spec, const AVFrame* frame, int offset) {
  // A call's samples, in and out, stay under kChunkSamples (but one input
  // sample at least): libswresample's buffers are sized to one call.
  const int64_t rate = std::max(frame->sample_rate, 1);
  const int64_t chunk = std::clamp<int64_t>(
      std::min(kChunkSamples, kChunkSamples * rate / spec.audio.sample_rate), 1, kChunkSamples);
  for (int at = offset; at < frame->nb_samples; at += static_cast<int>(chunk)) {
    const int n = static_cast<int>(std::min<int64_t>(chunk, frame->nb_samples - at));
    RETURN_IF_ERROR(FeedChunk(spec, frame, at, n));
  }
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::FeedChunk(const TransformSpec& spec, const AVFrame* frame,
                                         int offset, int n) {
  const auto format = static_cast<AVSampleFormat>(frame->format);
  const int bytes_per_sample = av_get_bytes_per_sample(format);
  const int channels = frame->ch_layout.nb_channels;
  const uint8_t* in[kMaxInputChannels] = {};
  if (av_sample_fmt_is_planar(format)) {
    for (int c = 0; c < channels; ++c) {
      in[c] = frame->extended_data[c] + static_cast<size_t>(offset) * bytes_per_sample;
    }
  } else {
    in[0] = frame->extended_data[0] + static_cast<size_t>(offset) * bytes_per_sample * channels;
  }
  const int bound = swr_get_out_samples(swr_.get(), n);
  if (bound < 0) return AvError(bound, "audio: resampler");
  RETURN_IF_ERROR(Reserve(spec, bound));
  uint8_t* out[2] = {};
  for (int c = 0; c < spec.audio.channels; ++c) {
    out[c] = reinterpret_cast<uint8_t*>(planes_[c].data() + buffered_);
  }
  const int got = swr_convert(swr_.get(), out, bound, in, n);
  if (got < 0) return AvError(got, "audio: resampling");
  buffered_ += got;
  if (buffered_ > static_cast<int64_t>(spec.audio.max_samples)) {
    return absl::ResourceExhaustedError(absl::StrCat("audio: resampled to more than max_samples (",
                                                     spec.audio.max_samples,
                                                     ") samples per channel"));
  }
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::Flush(const TransformSpec& spec) {
  if (!swr_ready_) return absl::OkStatus();
  for (;;) {
    const int bound = swr_get_out_samples(swr_.get(), 0);
    if (bound < 0) return AvError(bound, "audio: resampler");
    if (bound == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Reserve(spec, bound));
    uint8_t* out[2] = {};
    for (int c = 0; c < spec.audio.channels; ++c) {
      out[c] = reinterpret_cast<uint8_t*>(planes_[c].data() + buffered_);
    }
    const int got = swr_convert(swr_.get(), out, bound, nullptr, 0);
    if (got < 0) return AvError(got, "audio: resampling");
    if (got == 0) return absl::OkStatus();
    buffered_ += got;
  }
}

absl::Status AudioClipDecoder::Pump(const TransformSpec& spec, Source* s, int64_t feed_from,
                                    int64_t want, bool* complete) {
  *complete = false;
  AVFormatContext* fmt = s->input->format();
  AVCodecContext* codec = s->codec.get();
  for (;;) {
    if (want >= 0 && buffered_ >= want) return absl::OkStatus();
    if (s->input->budget_spent()) return OverTime(spec);
    int rc = avcodec_receive_frame(codec, frame_.get());
    if (rc == AVERROR_EOF) {
      RETURN_IF_ERROR(Flush(spec));
      *complete = true;
      return absl::OkStatus();
    }
    if (rc == 0) {
      AVFrame* f = frame_.get();
      decoded_in_ += f->nb_samples;
      if (decoded_in_ > static_cast<int64_t>(spec.audio.max_samples)) {
        av_frame_unref(f);
        return absl::ResourceExhaustedError(absl::StrCat("audio: decoded more than max_samples (",
                                                         spec.audio.max_samples,
                                                         ") samples per channel"));
      }
      if (f->sample_rate > 0 &&
          static_cast<double>(decoded_in_) / f->sample_rate > spec.audio.max_duration_seconds) {
        av_frame_unref(f);
        return absl::ResourceExhaustedError(
            absl::StrCat("audio: decoded more than max_duration_seconds (",
                         spec.audio.max_duration_seconds, " s)"));
      }
      if (!swr_ready_) {
        absl::Status st = SetUpResampler(spec, f);
        if (!st.ok()) {
          av_frame_unref(f);
          return st;
        }
      } else {
        AVChannelLayout layout{};
        if (f->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC) {
          av_channel_layout_default(&layout, f->ch_layout.nb_channels);
        } else {
          av_channel_layout_copy(&layout, &f->ch_layout);
        }
        const bool same = f->sample_rate == swr_key_.in_rate && f->format == swr_key_.in_format &&
                          SameLayout(layout, swr_key_.in_layout);
        av_channel_layout_uninit(&layout);
        if (!same) {
          av_frame_unref(f);
          return absl::InvalidArgumentError(
              "audio: the stream changes its sample rate, sample format or channels midway");
        }
      }
      int offset = 0;
      if (feed_from >= 0) {
        // Seek path: place the frame by its pts, in input samples.
        const int64_t pts =
            f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
        if (pts == AV_NOPTS_VALUE) {
          av_frame_unref(f);
          return NotExact("a frame without pts");
        }
        const int64_t pos = av_rescale_q(pts, s->stream->time_base, AVRational{1, f->sample_rate});
        if ((s->next_pos < 0 && pos > feed_from) || (s->next_pos >= 0 && pos != s->next_pos)) {
          av_frame_unref(f);
          return NotExact("frames are not contiguous from the seek point");
        }
        s->next_pos = pos + f->nb_samples;
        offset = static_cast<int>(std::clamp<int64_t>(feed_from - pos, 0, f->nb_samples));
      }
      absl::Status st = Feed(spec, f, offset);
      av_frame_unref(f);
      RETURN_IF_ERROR(st);
      continue;
    }
    if (rc != AVERROR(EAGAIN)) return AvError(rc, "audio: decoding");
    if (s->eof_sent) return absl::InternalError("audio: decoder wants input after its drain");
    rc = av_read_frame(fmt, packet_.get());
    if (rc == AVERROR_EOF) {
      s->eof_sent = true;
      rc = avcodec_send_packet(codec, nullptr);
      if (rc < 0 && rc != AVERROR_EOF) return AvError(rc, "audio: draining the decoder");
      continue;
    }
    if (rc < 0) return AvError(rc, "audio: reading the container");
    if (packet_->stream_index != s->stream_index) {
      av_packet_unref(packet_.get());
      continue;
    }
    rc = avcodec_send_packet(codec, packet_.get());
    av_packet_unref(packet_.get());
    if (rc < 0) return AvError(rc, "audio: decoding");
  }
}

void AudioClipDecoder::WriteClip(const TransformSpec& spec, int64_t from, int64_t valid,
                                 float* out) {
  const int64_t l = spec.audio.clip_samples;
  valid = std::clamp<int64_t>(valid, 0, l);
  const int64_t before = spec.audio.padding == AudioPadding::kBoth ? (l - valid) / 2 : 0;
  for (int c = 0; c < spec.audio.channels; ++c) {
    float* dst = out + c * l;
    std::fill(dst, dst + before, 0.0f);
    if (valid > 0) std::memcpy(dst + before, planes_[c].data() + from, valid * sizeof(float));
    std::fill(dst + before + valid, dst + l, 0.0f);
  }
  trace_.valid_samples = valid;
}

void AudioClipDecoder::StartSample(const TransformSpec& spec) {
  buffered_ = 0;
  decoded_in_ = 0;
  swr_ready_ = false;
  planes_.resize(spec.audio.channels);
}

bool AudioClipDecoder::SeeksExactly(const Source& s) {
  // The length must be the header's (a probe's estimate from the bit rate
  // is not exact).
  if (s.stream_index >= static_cast<int>(s.header_durations.size()) ||
      s.header_durations[s.stream_index] <= 0 ||
      s.header_durations[s.stream_index] != s.stream->duration) {
    return false;
  }
  const char* demuxer = s.input->format()->iformat->name;
  if (std::strcmp(demuxer, "wav") != 0 && std::strcmp(demuxer, "flac") != 0) return false;
  const AVCodecDescriptor* desc = avcodec_descriptor_get(s.stream->codecpar->codec_id);
  if (desc == nullptr || (desc->props & AV_CODEC_PROP_INTRA_ONLY) == 0) return false;
  const int rate = s.stream->codecpar->sample_rate;
  return rate > 0 && s.stream->duration > 0 && s.stream->time_base.num == 1 &&
         s.stream->time_base.den == rate &&
         (s.stream->start_time == AV_NOPTS_VALUE || s.stream->start_time == 0);
}

absl::Status AudioClipDecoder::RunSeeking(const TransformSpec& spec, Source* s, Rng rng,
                                          float* out) {
  StartSample(spec);
  const int64_t r_in = s->stream->codecpar->sample_rate;
  const int64_t r_out = spec.audio.sample_rate;
  const int64_t n_in = s->stream->duration;
  const auto max_samples = static_cast<int64_t>(spec.audio.max_samples);
  if (n_in > max_samples) {
    return absl::ResourceExhaustedError(
        absl::StrCat("audio: the file declares ", n_in,
                     " samples per channel, more than max_samples (", max_samples, ")"));
  }
  // What swr gives for the whole stream (flushed): ceil(n_in * r_out / r_in).
  const int64_t n_out = MulDivCeil(n_in, r_out, r_in);
  if (n_out > max_samples) {
    return absl::ResourceExhaustedError(absl::StrCat("audio: resampled to more than max_samples (",
                                                     max_samples, ") samples per channel"));
  }
  const int64_t l = spec.audio.clip_samples;
  const int64_t start = AudioWindowStart(spec, n_out, rng);
  // Feed the resampler from input sample p: on its phase grid (p * r_out /
  // r_in whole, so its outputs fall on the whole decode's) and a filter
  // length or two before the window (the outputs there see the same inputs).
  const int64_t g = std::gcd(r_in, r_out);
  const int64_t step = r_in / g;
  const double factor = std::min(1.0, 0.97 * static_cast<double>(r_out) / r_in);
  const int64_t margin = 2 * static_cast<int64_t>(std::ceil(kSwrFilterSize / factor)) + 256;
  int64_t p = MulDivFloor(start, r_in, r_out) - margin;
  p = p <= 0 ? 0 : p / step * step;
  const int64_t q = MulDivFloor(p, r_out, r_in);  // exact: p is on the grid
  if (p > 0) {
    const int rc = av_seek_frame(s->input->format(), s->stream_index, p, AVSEEK_FLAG_BACKWARD);
    if (rc < 0) return NotExact("seek failed");
    trace_.seeked = true;
  }
  bool complete = false;
  const int64_t want = start - q + l;
  RETURN_IF_ERROR(Pump(spec, s, p, want, &complete));
  if (buffered_ < want && q + buffered_ != n_out) {
    return NotExact("the stream is not as long as its header says");
  }
  trace_.total_samples = n_out;
  trace_.crop_start = start;
  WriteClip(spec, start - q, std::min(l, n_out - start), out);
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::RunWhole(const TransformSpec& spec, Source* s, Rng rng, float* out) {
  StartSample(spec);
  bool complete = false;
  RETURN_IF_ERROR(Pump(spec, s, -1, -1, &complete));
  const int64_t n = buffered_;
  if (n == 0) return absl::InvalidArgumentError("audio: the file decodes to no samples");
  const int64_t start = AudioWindowStart(spec, n, rng);
  trace_.decoded_samples = n;
  trace_.total_samples = n;
  trace_.crop_start = start;
  WriteClip(spec, start, std::min(spec.audio.clip_samples, n - start), out);
  return absl::OkStatus();
}

absl::Status AudioClipDecoder::Run(std::span<const uint8_t> bytes, const TransformSpec& spec,
                                   Rng& rng, uint8_t* out) {
  trace_ = Trace{};
  float* clip = reinterpret_cast<float*>(out);
  const AvDecodeBudget budget = AvDecodeBudget::StartNow(spec.max_decode_seconds);
  absl::Status st;
  {
    Source source;
    source.budget = budget;
    st = OpenSource(bytes, spec, &source);
    if (st.ok()) {
      trace_.input_sample_rate = source.codec->sample_rate;
      trace_.input_channels = source.codec->ch_layout.nb_channels;
      if (SeeksExactly(source)) {
        st = RunSeeking(spec, &source, rng, clip);
        if (absl::IsAborted(st)) trace_.seeked = false;
      } else {
        st = RunWhole(spec, &source, rng, clip);
      }
    }
  }
  if (absl::IsAborted(st)) {  // the seek path was not exact: decode the whole file
    Source source;
    source.budget = budget;
    st = OpenSource(bytes, spec, &source);
    if (st.ok()) st = RunWhole(spec, &source, rng, clip);
  }
  for (auto& plane : planes_) {
    if (plane.capacity() > kKeptPlaneFloats) std::vector<float>().swap(plane);
  }
  // A resampler for many channels or a steep ratio is not kept either.
  if (swr_ != nullptr && ResamplerBytes(swr_key_.in_rate, swr_key_.in_layout.nb_channels,
                                        swr_key_.out_rate) > kKeptResamplerBytes) {
    swr_.reset();
    av_channel_layout_uninit(&swr_key_.in_layout);
    swr_key_ = ResamplerKey{};
  }
  return st;
}

}  // namespace conveyor
