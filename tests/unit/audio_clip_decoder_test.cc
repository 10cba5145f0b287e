// AudioClipDecoder on hand-made WAV files in memory (no resampling: 16 kHz
// mono s16 in and out, so every output sample is the input / 32768): the
// window the crop rules choose, padding, the channel rules, the seek path,
// the spec's checks and errors of the sample. The comparisons with ffmpeg
// across codecs and rates are in tests/python/test_audio_clip_decoder.py.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/base/rng.h"
#include "core/decode/audio_clip_decoder.h"
#include "core/decode/transform_spec.h"
#include "tests/unit/cpu_contention.h"

namespace conveyor {
namespace {

void Put16(std::vector<uint8_t>* b, uint16_t v) {
  b->push_back(v & 0xff);
  b->push_back(v >> 8);
}
void Put32(std::vector<uint8_t>* b, uint32_t v) {
  Put16(b, v & 0xffff);
  Put16(b, v >> 16);
}

// A PCM s16 WAV: frames[i * channels + c].
std::vector<uint8_t> Wav(int rate, int channels, const std::vector<int16_t>& frames) {
  std::vector<uint8_t> b;
  const uint32_t data = static_cast<uint32_t>(frames.size() * 2);
  for (char c : std::string("RIFF")) b.push_back(c);
  Put32(&b, 36 + data);
  for (char c : std::string("WAVEfmt ")) b.push_back(c);
  Put32(&b, 16);
  Put16(&b, 1);  // PCM
  Put16(&b, channels);
  Put32(&b, rate);
  Put32(&b, rate * channels * 2);
  Put16(&b, channels * 2);
  Put16(&b, 16);
  for (char c : std::string("data")) b.push_back(c);
  Put32(&b, data);
  for (int16_t s : frames) Put16(&b, static_cast<uint16_t>(s));
  return b;
}

// Sample i of channel c: distinct and exactly representable.
int16_t Value(int64_t i, int c) { return static_cast<int16_t>((i * 7 + c * 1000) % 30000 - 15000); }

std::vector<int16_t> Ramp(int64_t n, int channels) {
  std::vector<int16_t> f;
  for (int64_t i = 0; i < n; ++i) {
    for (int c = 0; c < channels; ++c) f.push_back(Value(i, c));
  }
  return f;
}

TransformSpec Spec(int channels, int64_t clip) {
  TransformSpec s;
  s.kind = MediaKind::kAudio;
  s.dtype = DType::kFloat32;
  s.audio.sample_rate = 16000;
  s.audio.channels = channels;
  s.audio.clip_samples = clip;
  REQUIRE(ValidateTransformSpec(s).ok());
  return s;
}

std::vector<float> Decode(AudioClipDecoder& d, const std::vector<uint8_t>& bytes,
                          const TransformSpec& spec, uint64_t key, absl::Status* st) {
  std::vector<float> out(spec.audio.channels * spec.audio.clip_samples, -7.0f);
  Rng rng = Rng::ForKeys(1, 0, key);
  *st = d.Run(bytes, spec, rng, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

TEST_CASE("audio: train crops are the Rng's window, eval the centre", "[audio]") {
  const int64_t n = 48000;
  const auto wav = Wav(16000, 1, Ramp(n, 1));
  AudioClipDecoder d;
  for (AugmentMode mode : {AugmentMode::kTrain, AugmentMode::kEval}) {
    TransformSpec spec = Spec(1, 1000);
    spec.mode = mode;
    for (uint64_t key = 0; key < 4; ++key) {
      absl::Status st;
      const std::vector<float> out = Decode(d, wav, spec, key, &st);
      REQUIRE(st.ok());
      Rng rng = Rng::ForKeys(1, 0, key);
      const int64_t want = mode == AugmentMode::kTrain
                               ? static_cast<int64_t>(rng.Below(n - 1000 + 1))
                               : (n - 1000) / 2;
      CHECK(d.trace().crop_start == want);
      CHECK(d.trace().total_samples == n);
      CHECK(d.trace().seeked == (want > 2048));
      for (int64_t i = 0; i < 1000; ++i) {
        INFO(i);
        REQUIRE(out[i] == Value(want + i, 0) / 32768.0f);
      }
    }
  }
}

TEST_CASE("audio: short files are padded at the end or on both sides", "[audio]") {
  const auto wav = Wav(16000, 1, Ramp(5, 1));
  AudioClipDecoder d;
  TransformSpec spec = Spec(1, 12);
  absl::Status st;
  std::vector<float> out = Decode(d, wav, spec, 0, &st);
  REQUIRE(st.ok());
  CHECK(d.trace().valid_samples == 5);
  for (int i = 0; i < 12; ++i) CHECK(out[i] == (i < 5 ? Value(i, 0) / 32768.0f : 0.0f));
  spec.audio.padding = AudioPadding::kBoth;
  out = Decode(d, wav, spec, 0, &st);
  REQUIRE(st.ok());
  for (int i = 0; i < 12; ++i) {
    CHECK(out[i] == (i >= 3 && i < 8 ? Value(i - 3, 0) / 32768.0f : 0.0f));
  }
}

TEST_CASE("audio: stereo to mono is the mean, mono to stereo a copy", "[audio]") {
  AudioClipDecoder d;
  absl::Status st;
  const auto stereo = Wav(16000, 2, Ramp(100, 2));
  std::vector<float> out = Decode(d, stereo, Spec(1, 100), 0, &st);
  REQUIRE(st.ok());
  for (int i = 0; i < 100; ++i) {
    CHECK(out[i] == Approx((Value(i, 0) + Value(i, 1)) / 2 / 32768.0).margin(1e-7));
  }
  const auto mono = Wav(16000, 1, Ramp(100, 1));
  out = Decode(d, mono, Spec(2, 100), 0, &st);
  REQUIRE(st.ok());
  for (int i = 0; i < 100; ++i) {
    CHECK(out[i] == Value(i, 0) / 32768.0f);
    CHECK(out[100 + i] == Value(i, 0) / 32768.0f);
  }
}

TEST_CASE("audio: bad files and limits are errors of the sample", "[audio]") {
  AudioClipDecoder d;
  absl::Status st;
  std::vector<uint8_t> noise(4000);
  for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 131 + 7);
  Decode(d, noise, Spec(1, 10), 0, &st);
  CHECK(absl::IsInvalidArgument(st));
  CHECK(std::string(st.message()).rfind("audio: not a recognised media file", 0) == 0);

  TransformSpec spec = Spec(1, 10);
  spec.audio.max_samples = 1000;
  Decode(d, Wav(16000, 1, Ramp(5000, 1)), spec, 0, &st);
  CHECK(absl::IsResourceExhausted(st));
  CHECK(std::string(st.message()).find("more than max_samples (1000)") != std::string::npos);

  spec = Spec(1, 10);
  spec.audio.max_duration_seconds = 0.1;
  Decode(d, Wav(16000, 1, Ramp(5000, 1)), spec, 0, &st);
  CHECK(absl::IsResourceExhausted(st));
  CHECK(std::string(st.message()).find("max_duration_seconds (0.1 s)") != std::string::npos);

  // The decoder is fine after errors.
  const std::vector<float> out = Decode(d, Wav(16000, 1, Ramp(10, 1)), Spec(1, 10), 0, &st);
  REQUIRE(st.ok());
  CHECK(out[9] == Value(9, 0) / 32768.0f);
}

// The budget is the decoding thread's CPU time: a file whose wall time is
// several budgets long because its thread shares a CPU with busy threads (a
// loaded host) still decodes, as long as its CPU time fits.
TEST_CASE("audio: max_decode_seconds charges CPU time, not time descheduled", "[audio]") {
  // 8 s of 48 kHz stereo resampled to 16 kHz mono, whole.
  const auto wav = Wav(48000, 2, Ramp(8 * 48000, 2));
  TransformSpec spec = Spec(1, 8 * 16000);
  AudioClipDecoder d;
  absl::Status st;
  spec.max_decode_seconds = testing::ThriceAloneCpuSeconds([&] {
    Decode(d, wav, spec, 0, &st);
    REQUIRE(st.ok());
  });
  const std::optional<double> wall =
      testing::ContendedWallSeconds(8, [&] { Decode(d, wav, spec, 0, &st); });
  REQUIRE(wall.has_value());
  INFO("budget " << spec.max_decode_seconds << " s, wall when contended " << *wall << " s");
  REQUIRE(*wall > spec.max_decode_seconds);  // the case under test: descheduled past the budget
  CHECK(st.ok());
  if (!st.ok()) FAIL(st.ToString());
}

TEST_CASE("audio: the spec's checks name the field", "[audio]") {
  TransformSpec s = Spec(1, 10);
  s.dtype = DType::kUint8;
  CHECK(std::string(ValidateTransformSpec(s).message()).find("dtype must be float32") !=
        std::string::npos);
  s = Spec(1, 10);
  s.audio.channels = 3;
  CHECK(std::string(ValidateTransformSpec(s).message()).find("audio.channels") !=
        std::string::npos);
  s = Spec(1, 10);
  s.audio.sample_rate = 10;
  CHECK(std::string(ValidateTransformSpec(s).message()).find("audio.sample_rate") !=
        std::string::npos);
  s = Spec(1, 10);
  s.audio.clip_samples = 0;
  CHECK(std::string(ValidateTransformSpec(s).message()).find("audio.clip_samples") !=
        std::string::npos);
}

TEST_CASE("audio: absurd rates and resampler memory are refused before the resampler is built",
          "[audio]") {
  AudioClipDecoder d;
  absl::Status st;
  // 64 channels at 1 Hz, 64 KiB: 512 s that resampled to 16 kHz made
  // libswresample hold all 64 channels of a frame's 16000-fold output.
  const std::vector<int16_t> tiny(32 * 1024, 100);
  Decode(d, Wav(1, 64, tiny), Spec(1, 16000), 0, &st);
  CHECK(absl::IsInvalidArgument(st));
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("a sample rate of 1 Hz is too low to resample to 16000 Hz"));

  // A steep downsampling needs a long filter: refused against max_decode_memory.
  TransformSpec spec = Spec(2, 100);
  spec.max_decode_memory = 4u << 20;
  Decode(d, Wav(384000, 2, Ramp(4000, 2)), spec, 0, &st);
  CHECK(absl::IsResourceExhausted(st));
  CHECK_THAT(std::string(st.message()),
             Catch::Contains("resampling 2 channels from 384000 Hz to 16000 Hz needs about") &&
                 Catch::Contains("more than max_decode_memory (4.0 MiB)"));
  spec.max_decode_memory = 128u << 20;
  Decode(d, Wav(384000, 2, Ramp(4000, 2)), spec, 0, &st);
  CHECK(st.ok());

  // Within the ratio, many channels upsampled steeply decode (fed to the
  // resampler a bounded chunk at a time), and the decoder is fine after.
  Decode(d, Wav(16, 64, tiny), Spec(1, 16000), 0, &st);
  CHECK(st.ok());
  CHECK(d.trace().total_samples == 512 * 1000);
  const std::vector<float> out = Decode(d, Wav(16000, 1, Ramp(10, 1)), Spec(1, 10), 0, &st);
  REQUIRE(st.ok());
  CHECK(out[9] == Value(9, 0) / 32768.0f);
}

}  // namespace
}  // namespace conveyor
