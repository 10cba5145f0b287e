// relay_bench: what re-laying JPEGs with restart intervals that tile their
// MCU rows (core/decode/jpeg_relayout.h) buys the decode + augment hot path
// (SampleTransformer::Run), side by side over one folder of JPEGs in memory.
//
//   relay_bench DIR [--rounds N] [--mode train|eval] [--size S] [--no-dct]
//               [--only original|relaid]
//
// First every file is re-laid (timed: the one-time cost per image, and the
// copies' size against the originals'), and each image's output from the
// copy is compared with the original's, byte for byte, for the round-0
// draws (a mismatch fails the run). Then rounds alternate between the
// originals and the copies, one thread, the same draws (sample i of round r
// draws from Rng::ForKeys(0, r, i)); the first pair is a warm-up. Prints
// the median CPU-ms/image of each and the ratio original / re-laid.
// --only runs the rounds of one side alone, for instruction counts:
//   valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*Round*'
//       build/bench/relay_bench DIR --rounds 2 --only original   (one command line)
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_figures.h"
#include "bench/bench_files.h"
#include "core/base/rng.h"
#include "core/decode/jpeg_relayout.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"

namespace {

using conveyor::bench::LoadJpegs;
using conveyor::bench::Median;

// CPU-ms per image of one round over `files`; counts the images decoded
// from their intervals.
double Round(const std::vector<std::vector<uint8_t>>& files, const conveyor::TransformSpec& spec,
             int round, conveyor::SampleTransformer& t, int* from_intervals, int* errors) {
  std::vector<uint8_t> out(conveyor::SampleBytes(spec));
  const double c0 = conveyor::bench::ProcessCpuSeconds();
  for (size_t i = 0; i < files.size(); ++i) {
    conveyor::Rng rng = conveyor::Rng::ForKeys(0, static_cast<uint64_t>(round), i);
    if (!t.Run(files[i], spec, rng, out.data()).ok()) ++*errors;
    if (t.last().from_intervals) ++*from_intervals;
  }
  return (conveyor::bench::ProcessCpuSeconds() - c0) * 1e3 / static_cast<double>(files.size());
}

}  // namespace

constexpr const char* kUsage =
    "usage: relay_bench DIR [--rounds N] [--mode train|eval] [--size S] [--no-dct] "
    "[--only original|relaid]\n";

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fputs(kUsage, argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? stdout : stderr);
    return argc >= 2 && std::strcmp(argv[1], "--help") == 0 ? 0 : 2;
  }
  const std::string dir = argv[1];
  int rounds = 6;
  std::string only;  // "": both sides
  conveyor::TransformSpec spec;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--rounds") {
      rounds = std::max(2, std::atoi(next().c_str()));
    } else if (a == "--mode") {
      spec.mode = next() == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
    } else if (a == "--size") {
      spec.output_height = spec.output_width = std::atoi(next().c_str());
    } else if (a == "--no-dct") {
      spec.dct_scaling = false;
    } else if (a == "--only") {
      only = next();
      if (only != "original" && only != "relaid") {
        std::fprintf(stderr, "--only takes original or relaid\n%s", kUsage);
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (absl::Status s = conveyor::ValidateTransformSpec(spec); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "relay_bench: %s is not a folder\n", dir.c_str());
    return 2;
  }
  const std::vector<std::vector<uint8_t>> originals = LoadJpegs(dir);
  if (originals.empty()) {
    std::fprintf(stderr, "no .jpg/.jpeg files under %s\n", dir.c_str());
    return 2;
  }

  // The copies: one-time cost, size, and the same output byte for byte.
  std::vector<std::vector<uint8_t>> relaid;
  size_t original_bytes = 0, relaid_bytes = 0;
  int refused = 0;
  const double r0 = conveyor::bench::ProcessCpuSeconds();
  for (const auto& f : originals) {
    absl::StatusOr<std::vector<uint8_t>> copy = conveyor::RelayJpeg(f);
    if (!copy.ok()) {
      ++refused;
      relaid.push_back(f);  // served as it is
    } else {
      relaid.push_back(std::move(*copy));
    }
    original_bytes += f.size();
    relaid_bytes += relaid.back().size();
  }
  const double relay_ms =
      (conveyor::bench::ProcessCpuSeconds() - r0) * 1e3 / static_cast<double>(originals.size());
  int mismatches = 0;
  {
    conveyor::SampleTransformer a, b;
    std::vector<uint8_t> out_a(conveyor::SampleBytes(spec)), out_b(out_a.size());
    for (size_t i = 0; i < originals.size(); ++i) {
      conveyor::Rng ra = conveyor::Rng::ForKeys(0, 0, i), rb = conveyor::Rng::ForKeys(0, 0, i);
      const bool ok_a = a.Run(originals[i], spec, ra, out_a.data()).ok();
      const bool ok_b = b.Run(relaid[i], spec, rb, out_b.data()).ok();
      if (ok_a != ok_b || (ok_a && out_a != out_b)) ++mismatches;
    }
  }
  std::printf(
      "%zu files, %.1f KB mean; %s %dx%d%s; re-laid in %.3f CPU-ms/image, %d refused, size "
      "%.3fx the originals'; outputs identical: %s (%d of %zu differ)\n",
      originals.size(), original_bytes / 1024.0 / originals.size(), conveyor::ToString(spec.mode),
      spec.output_height, spec.output_width, spec.dct_scaling ? "" : " no-dct", relay_ms, refused,
      static_cast<double>(relaid_bytes) / static_cast<double>(original_bytes),
      mismatches == 0 ? "yes" : "NO", mismatches, originals.size());

  std::vector<double> plain_ms, relaid_ms;
  int errors = 0, intervals = 0, ignored = 0;
  conveyor::SampleTransformer plain_t, relaid_t;
  for (int r = 0; r < rounds; ++r) {
    // Alternate which goes first, so drift in the machine's load hits both.
    double p = 0, q = 0;
    if (!only.empty()) {
      // One side alone (for instruction counts): no ratio.
      if (only == "original") {
        p = Round(originals, spec, r, plain_t, &ignored, &errors);
      } else {
        q = Round(relaid, spec, r, relaid_t, r > 0 ? &intervals : &ignored, &errors);
      }
    } else if (r % 2 == 0) {
      p = Round(originals, spec, r, plain_t, &ignored, &errors);
      q = Round(relaid, spec, r, relaid_t, r > 0 ? &intervals : &ignored, &errors);
    } else {
      q = Round(relaid, spec, r, relaid_t, &intervals, &errors);
      p = Round(originals, spec, r, plain_t, &ignored, &errors);
    }
    std::printf("round %d: original %.3f CPU-ms/image, re-laid %.3f%s\n", r, p, q,
                r == 0 ? " (warm-up, not counted)" : "");
    if (r > 0) {
      plain_ms.push_back(p);
      relaid_ms.push_back(q);
    }
  }
  if (!only.empty()) {
    const double m = Median(only == "original" ? plain_ms : relaid_ms);
    std::printf("median: %s %.3f CPU-ms/image; errors: %d\n", only.c_str(), m, errors);
    return errors == 0 && mismatches == 0 ? 0 : 1;
  }
  const double counted = static_cast<double>(originals.size()) * (rounds - 1);
  std::printf(
      "median: original %.3f CPU-ms/image (%.0f images/s per core), re-laid %.3f (%.0f); "
      "speedup %.2fx; %.0f%% of the re-laid decodes read only their intervals; errors: %d\n",
      Median(plain_ms), 1e3 / Median(plain_ms), Median(relaid_ms), 1e3 / Median(relaid_ms),
      Median(plain_ms) / Median(relaid_ms), 100.0 * intervals / counted, errors);
  return errors == 0 && mismatches == 0 ? 0 : 1;
}
