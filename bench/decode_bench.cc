// decode_bench: cost per image of the decode + augment hot path
// (SampleTransformer::Run) over a folder of JPEGs held in memory.
//
//   decode_bench DIR [--rounds N] [--threads T] [--mode train|eval]
//                    [--dtype uint8|float32|float16] [--layout nchw|nhwc]
//                    [--size S] [--no-dct] [--naive]
//
// Every .jpg/.jpeg file under DIR (recursively) is read into memory first, so
// only decoding and transforming are timed. Each round runs every image once
// (sample i of round r draws from Rng::ForKeys(0, r, i)); the first round is
// a warm-up. Prints the median over rounds of wall ms/image and of process
// CPU ms/image (CLOCK_PROCESS_CPUTIME_ID, all threads), and the best round's
// CPU ms/image (the least disturbed by other load). --naive times the
// plain approach instead: a full-size decode, then the same Pillow-exact
// resize of the same crop box.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_figures.h"
#include "bench/bench_files.h"
#include "core/base/rng.h"
#include "core/decode/crop_box.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/resize.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"

namespace {

using conveyor::TransformSpec;
using conveyor::bench::LoadJpegs;
using conveyor::bench::Median;

double Now(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The plain pipeline for comparison: decode everything, then resize the crop.
class NaiveTransformer {
 public:
  bool Run(const std::vector<uint8_t>& bytes, const TransformSpec& spec, conveyor::Rng& rng,
           uint8_t* out) {
    absl::StatusOr<conveyor::JpegHeader> h = decoder_.ReadHeader(bytes, spec.max_pixels);
    if (!h.ok()) return false;
    const conveyor::CropBox box = conveyor::RandomResizedCropBox(h->width, h->height, spec, rng);
    rng.Bernoulli(spec.flip_probability);
    if (!decoder_.DecodeImage(1, &image_).ok()) return false;
    conveyor::ResampleAxis x{box.width,         0, static_cast<double>(box.width),
                             spec.output_width, 0, spec.output_width};
    conveyor::ResampleAxis y{box.height,         0, static_cast<double>(box.height),
                             spec.output_height, 0, spec.output_height};
    const size_t stride = static_cast<size_t>(image_.width) * 3;
    return conveyor::ResizeRgb(image_.pixels.data() + box.top * stride + box.left * 3, box.width,
                               box.height, stride, x, y, out)
        .ok();
  }

 private:
  conveyor::JpegDecoder decoder_;
  conveyor::RgbImage image_;
};

}  // namespace

constexpr const char* kUsage =
    "usage: decode_bench DIR [--rounds N] [--threads T] [--mode train|eval] "
    "[--dtype uint8|float32|float16] [--layout nchw|nhwc] [--size S] [--no-dct] [--naive]\n";

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if (argc < 2 || argv[1][0] == '-') {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string dir = argv[1];
  int rounds = 6, threads = 1;
  bool naive = false;
  TransformSpec spec;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--rounds") {
      rounds = std::max(2, std::atoi(next().c_str()));
    } else if (a == "--threads") {
      threads = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--mode") {
      spec.mode = next() == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
    } else if (a == "--dtype") {
      const std::string v = next();
      spec.dtype = v == "float32"   ? conveyor::DType::kFloat32
                   : v == "float16" ? conveyor::DType::kFloat16
                                    : conveyor::DType::kUint8;
    } else if (a == "--layout") {
      spec.layout = next() == "nhwc" ? conveyor::Layout::kNHWC : conveyor::Layout::kNCHW;
    } else if (a == "--size") {
      spec.output_height = spec.output_width = std::atoi(next().c_str());
    } else if (a == "--no-dct") {
      spec.dct_scaling = false;
    } else if (a == "--naive") {
      naive = true;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (absl::Status s = conveyor::ValidateTransformSpec(spec); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "decode_bench: %s is not a folder\n", dir.c_str());
    return 2;
  }
  const std::vector<std::vector<uint8_t>> files = LoadJpegs(dir);
  if (files.empty()) {
    std::fprintf(stderr, "no .jpg/.jpeg files under %s\n", dir.c_str());
    return 2;
  }
  size_t total_bytes = 0;
  for (const auto& f : files) total_bytes += f.size();
  std::printf("%zu files, %.1f KB mean; %s %dx%d %s %s%s, %d thread(s)%s\n", files.size(),
              total_bytes / 1024.0 / files.size(), conveyor::ToString(spec.mode),
              spec.output_height, spec.output_width, conveyor::ToString(spec.dtype),
              conveyor::ToString(spec.layout), spec.dct_scaling ? "" : " no-dct", threads,
              naive ? ", NAIVE full decode + resize" : "");

  std::vector<double> wall_ms, cpu_ms;
  int errors = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<int> thread_errors(threads, 0);
    const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_PROCESS_CPUTIME_ID);
    auto work = [&](int t) {
      conveyor::SampleTransformer transformer;
      NaiveTransformer naive_transformer;
      std::vector<uint8_t> out(conveyor::SampleBytes(spec));
      for (size_t i = t; i < files.size(); i += threads) {
        conveyor::Rng rng = conveyor::Rng::ForKeys(0, r, i);
        const bool ok = naive ? naive_transformer.Run(files[i], spec, rng, out.data())
                              : transformer.Run(files[i], spec, rng, out.data()).ok();
        if (!ok) ++thread_errors[t];
      }
    };
    if (threads == 1) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
      for (auto& th : pool) th.join();
    }
    const double w1 = Now(CLOCK_MONOTONIC), c1 = Now(CLOCK_PROCESS_CPUTIME_ID);
    for (int e : thread_errors) errors += e;
    const double wm = (w1 - w0) * 1e3 / files.size(), cm = (c1 - c0) * 1e3 / files.size();
    std::printf("round %d: %.3f ms/image wall, %.3f CPU-ms/image%s\n", r, wm, cm,
                r == 0 ? " (warm-up, not counted)" : "");
    if (r > 0) {
      wall_ms.push_back(wm);
      cpu_ms.push_back(cm);
    }
  }
  std::printf(
      "median: %.3f ms/image wall (%.0f images/s), %.3f CPU-ms/image "
      "(best round %.3f CPU-ms/image); errors: %d\n",
      Median(wall_ms), 1e3 / Median(wall_ms), Median(cpu_ms),
      *std::min_element(cpu_ms.begin(), cpu_ms.end()), errors);
  return errors == 0 ? 0 : 1;
}
