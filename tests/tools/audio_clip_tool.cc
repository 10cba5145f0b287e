// audio_clip_tool: drives AudioClipDecoder from the command line so the
// Python tests can compare its clips with the `ffmpeg` CLI's own decode.
//
//   audio_clip_tool IN... --out OUT [options]
// Decodes each IN with one decoder (reused, as a worker reuses it), with
// Rng::ForKeys(seed, 0, index + k) for the k-th input, and writes the clips
// as float32 [count, C, L] to OUT (a failed input's clip is left zero).
// Options: --rate R --channels C --clip L --mode train|eval
//   --crop auto|random|centre --padding end|both --seed S --index I
//   --max-samples M --max-duration SECONDS --max-decode-seconds SECONDS
// Prints one JSON line per input: {"ok": true, "input_rate", "input_channels",
// "total", "start", "valid", "seeked"} or {"ok": false, "error": "..."}.
// Exits 2 on a usage error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/rng.h"
#include "core/decode/audio_clip_decoder.h"
#include "core/decode/transform_spec.h"
#include "tests/support/tool_files.h"

namespace {

using conveyor::TransformSpec;

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "audio_clip_tool: %s\n", msg.c_str());
  std::exit(2);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  TransformSpec spec;
  spec.kind = conveyor::MediaKind::kAudio;
  spec.dtype = conveyor::DType::kFloat32;
  std::vector<std::string> inputs;
  std::string out_path;
  uint64_t seed = 0, index = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      inputs.push_back(a);
      continue;
    }
    if (i + 1 >= argc) Fail("missing value for " + a);
    const std::string v = argv[++i];
    if (a == "--out")
      out_path = v;
    else if (a == "--rate")
      spec.audio.sample_rate = std::atoi(v.c_str());
    else if (a == "--channels")
      spec.audio.channels = std::atoi(v.c_str());
    else if (a == "--clip")
      spec.audio.clip_samples = std::atoll(v.c_str());
    else if (a == "--mode")
      spec.mode = v == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
    else if (a == "--crop") {
      spec.audio.crop = v == "random"   ? conveyor::AudioCrop::kRandom
                        : v == "centre" ? conveyor::AudioCrop::kCentre
                                        : conveyor::AudioCrop::kAuto;
    } else if (a == "--padding") {
      spec.audio.padding =
          v == "both" ? conveyor::AudioPadding::kBoth : conveyor::AudioPadding::kEnd;
    } else if (a == "--seed")
      seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--index")
      index = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--max-samples")
      spec.audio.max_samples = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--max-duration")
      spec.audio.max_duration_seconds = std::atof(v.c_str());
    else if (a == "--max-decode-seconds")
      spec.max_decode_seconds = std::atof(v.c_str());
    else
      Fail("unknown option " + a);
  }
  if (inputs.empty() || out_path.empty()) Fail("usage: audio_clip_tool IN... --out OUT [options]");
  if (auto st = conveyor::ValidateTransformSpec(spec); !st.ok()) Fail(std::string(st.message()));

  const size_t floats = static_cast<size_t>(spec.audio.channels) * spec.audio.clip_samples;
  std::vector<float> clips(floats * inputs.size(), 0.0f);
  conveyor::AudioClipDecoder decoder;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<uint8_t> bytes =
        conveyor::testing::ReadFileOrExit("audio_clip_tool", inputs[k]);
    conveyor::Rng rng = conveyor::Rng::ForKeys(seed, 0, index + k);
    std::vector<float> clip(floats);
    const absl::Status st = decoder.Run(bytes, spec, rng, reinterpret_cast<uint8_t*>(clip.data()));
    if (!st.ok()) {
      std::printf("{\"ok\": false, \"error\": %s}\n", JsonString(st.ToString()).c_str());
      continue;
    }
    std::copy(clip.begin(), clip.end(), clips.begin() + k * floats);
    const auto& t = decoder.trace();
    std::printf(
        "{\"ok\": true, \"input_rate\": %d, \"input_channels\": %d, \"total\": %lld, "
        "\"start\": %lld, \"valid\": %lld, \"seeked\": %s}\n",
        t.input_sample_rate, t.input_channels, static_cast<long long>(t.total_samples),
        static_cast<long long>(t.crop_start), static_cast<long long>(t.valid_samples),
        t.seeked ? "true" : "false");
  }
  std::ofstream out(out_path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(clips.data()),
            static_cast<std::streamsize>(clips.size() * sizeof(float)));
  return out ? 0 : 1;
}
