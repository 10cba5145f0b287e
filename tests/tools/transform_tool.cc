// transform_tool: drives the decode + augment layer from the command line so
// the Python tests can compare it with PIL / torchvision.
//
//   transform_tool decode IN OUT [--scale D] [--region x0,y0,x1,y1]
//       RGB of the image decoded at 1/D (default 1), or of a region of it
//       (scaled-image pixels), through JpegDecoder::DecodeRegion.
//   transform_tool resize IN OUT --crops "t,l,h,w,oh,ow;..." [--scalar]
//       Full-size decode, then Pillow-style resize of each crop box
//       (PIL img.crop((l,t,l+w,t+h)).resize((ow,oh), BILINEAR)); outputs are
//       concatenated.
//   transform_tool crop IN OUT --crops "t,l,h,w[,flip[,d]];..." [spec options]
//       SampleTransformer::RunCrop per box (flip 0/1, d = DCT scale, 0 auto).
//   transform_tool run IN OUT [--seed S --index I --count N] [spec options]
//       SampleTransformer::Run N times with Rng::ForKeys(S, 0, I + k).
// Spec options: --mode train|eval --size H,W --layout nchw|nhwc
//   --dtype uint8|float32|float16 --resize-size N --no-dct --scalar
//   --flip-probability P --vflip-probability P --grayscale-probability P
//   --padding P --padding-mode constant|edge|reflect --fill V
//   --jitter p,bmin,bmax,cmin,cmax,smin,smax,hmin,hmax --blur p,kw,kh,smin,smax
//   --trivial-augment BINS
// Prints one JSON line per sample to stdout (geometry the transformer used);
// errors go to stderr with exit status 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/rng.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/resize.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"
#include "tests/support/tool_files.h"

namespace {

using conveyor::CropBox;
using conveyor::TransformSpec;

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "transform_tool: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<long> Numbers(const std::string& s) {
  std::vector<long> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::strtol(item.c_str(), nullptr, 10));
  return v;
}

std::vector<double> Doubles(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::strtod(item.c_str(), nullptr));
  return v;
}

std::vector<std::vector<long>> NumberLists(const std::string& s) {
  std::vector<std::vector<long>> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (!item.empty()) out.push_back(Numbers(item));
  }
  return out;
}

struct Args {
  std::string command, in, out;
  int scale = 1;
  std::vector<long> region;
  std::string crops;
  bool scalar = false;
  uint64_t seed = 0, index = 0;
  int count = 1;
  TransformSpec spec;
};

Args Parse(int argc, char** argv) {
  if (argc < 4) Fail("usage: transform_tool decode|resize|crop|run IN OUT [options]");
  Args a;
  a.command = argv[1];
  a.in = argv[2];
  a.out = argv[3];
  for (int i = 4; i < argc; ++i) {
    const std::string opt = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail("missing value for " + opt);
      return argv[++i];
    };
    if (opt == "--scale") {
      a.scale = std::atoi(value().c_str());
    } else if (opt == "--region") {
      a.region = Numbers(value());
    } else if (opt == "--crops") {
      a.crops = value();
    } else if (opt == "--scalar") {
      a.scalar = true;
    } else if (opt == "--seed") {
      a.seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (opt == "--index") {
      a.index = std::strtoull(value().c_str(), nullptr, 10);
    } else if (opt == "--count") {
      a.count = std::atoi(value().c_str());
    } else if (opt == "--mode") {
      const std::string v = value();
      a.spec.mode = v == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
    } else if (opt == "--size") {
      const std::vector<long> v = Numbers(value());
      if (v.size() != 2) Fail("--size H,W");
      a.spec.output_height = static_cast<int>(v[0]);
      a.spec.output_width = static_cast<int>(v[1]);
    } else if (opt == "--layout") {
      a.spec.layout = value() == "nhwc" ? conveyor::Layout::kNHWC : conveyor::Layout::kNCHW;
    } else if (opt == "--dtype") {
      const std::string v = value();
      a.spec.dtype = v == "float32"   ? conveyor::DType::kFloat32
                     : v == "float16" ? conveyor::DType::kFloat16
                                      : conveyor::DType::kUint8;
    } else if (opt == "--resize-size") {
      a.spec.resize_size = std::atoi(value().c_str());
    } else if (opt == "--no-dct") {
      a.spec.dct_scaling = false;
    } else if (opt == "--flip-probability") {
      a.spec.flip_probability = std::strtod(value().c_str(), nullptr);
    } else if (opt == "--vflip-probability") {
      a.spec.vflip_probability = std::strtod(value().c_str(), nullptr);
    } else if (opt == "--grayscale-probability") {
      a.spec.grayscale_probability = std::strtod(value().c_str(), nullptr);
    } else if (opt == "--padding") {
      a.spec.image_ops.padding = std::atoi(value().c_str());
    } else if (opt == "--padding-mode") {
      const std::string v = value();
      a.spec.image_ops.padding_mode = v == "edge"      ? conveyor::PadMode::kEdge
                                      : v == "reflect" ? conveyor::PadMode::kReflect
                                                       : conveyor::PadMode::kConstant;
    } else if (opt == "--fill") {
      a.spec.image_ops.fill = std::atoi(value().c_str());
    } else if (opt == "--jitter") {
      const std::vector<double> v = Doubles(value());
      if (v.size() != 9) Fail("--jitter p,bmin,bmax,cmin,cmax,smin,smax,hmin,hmax");
      conveyor::ImageOpsSpec& o = a.spec.image_ops;
      o.jitter_probability = v[0];
      o.brightness_min = v[1];
      o.brightness_max = v[2];
      o.contrast_min = v[3];
      o.contrast_max = v[4];
      o.saturation_min = v[5];
      o.saturation_max = v[6];
      o.hue_min = v[7];
      o.hue_max = v[8];
    } else if (opt == "--blur") {
      const std::vector<double> v = Doubles(value());
      if (v.size() != 5) Fail("--blur p,kw,kh,smin,smax");
      conveyor::ImageOpsSpec& o = a.spec.image_ops;
      o.blur_probability = v[0];
      o.blur_kernel_width = static_cast<int>(v[1]);
      o.blur_kernel_height = static_cast<int>(v[2]);
      o.blur_sigma_min = v[3];
      o.blur_sigma_max = v[4];
    } else if (opt == "--trivial-augment") {
      a.spec.image_ops.trivial_augment_bins = std::atoi(value().c_str());
    } else {
      Fail("unknown option " + opt);
    }
  }
  return a;
}

void PrintTrace(const conveyor::SampleTransformer::Trace& t, const TransformSpec& spec) {
  std::printf(
      "{\"width\": %d, \"height\": %d, \"crop\": [%d, %d, %d, %d], \"fallback\": %s, "
      "\"window\": [%d, %d, %d, %d], \"flip\": %s, \"vflip\": %s, \"grayscale\": %s, "
      "\"scale_denom\": %d, \"decoded\": [%d, %d, %d, %d], \"ops\": %s}\n",
      t.image_width, t.image_height, t.crop.top, t.crop.left, t.crop.height, t.crop.width,
      t.fallback ? "true" : "false", t.window.resized_height, t.window.resized_width, t.window.top,
      t.window.left, t.flip ? "true" : "false", t.vflip ? "true" : "false",
      t.grayscale ? "true" : "false", t.scale_denom, t.decoded.x0, t.decoded.y0, t.decoded.x1,
      t.decoded.y1, conveyor::ImageOpsDrawsJson(spec.image_ops, t.ops).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const std::vector<uint8_t> bytes = conveyor::testing::ReadFileOrExit("transform_tool", a.in);
  std::vector<uint8_t> result;

  if (a.command == "decode" || a.command == "resize") {
    conveyor::JpegDecoder decoder;
    absl::StatusOr<conveyor::JpegHeader> header = decoder.ReadHeader(bytes, a.spec.max_pixels);
    if (!header.ok()) Fail(std::string(header.status().message()));
    if (a.command == "decode" && !a.region.empty()) {
      if (a.region.size() != 4) Fail("--region x0,y0,x1,y1");
      conveyor::PixelRegion r{static_cast<int>(a.region[0]), static_cast<int>(a.region[1]),
                              static_cast<int>(a.region[2]), static_cast<int>(a.region[3])};
      const size_t row_bytes = static_cast<size_t>(r.x1 - r.x0) * 3;
      absl::Status s =
          decoder.DecodeRegion(r, a.scale, [&](const uint8_t* rows, size_t stride, int count) {
            for (int i = 0; i < count; ++i) {
              result.insert(result.end(), rows + i * stride, rows + i * stride + row_bytes);
            }
          });
      if (!s.ok()) Fail(std::string(s.message()));
      std::printf("{\"width\": %d, \"height\": %d}\n", r.x1 - r.x0, r.y1 - r.y0);
    } else {
      conveyor::RgbImage image;
      absl::Status s = decoder.DecodeImage(a.command == "decode" ? a.scale : 1, &image);
      if (!s.ok()) Fail(std::string(s.message()));
      if (a.command == "decode") {
        result = std::move(image.pixels);
        std::printf("{\"width\": %d, \"height\": %d}\n", image.width, image.height);
      } else {
        for (const std::vector<long>& c : NumberLists(a.crops)) {
          if (c.size() != 6) Fail("--crops entries are t,l,h,w,oh,ow");
          const int t = c[0], l = c[1], h = c[2], w = c[3], oh = c[4], ow = c[5];
          if (t < 0 || l < 0 || h <= 0 || w <= 0 || t + h > image.height || l + w > image.width) {
            Fail("crop outside the image");
          }
          conveyor::ResampleAxis x{w, 0, static_cast<double>(w), ow, 0, ow};
          conveyor::ResampleAxis y{h, 0, static_cast<double>(h), oh, 0, oh};
          std::vector<uint8_t> out(static_cast<size_t>(ow) * oh * 3);
          const size_t stride = static_cast<size_t>(image.width) * 3;
          absl::Status rs = conveyor::ResizeRgb(image.pixels.data() + t * stride + l * 3, w, h,
                                                stride, x, y, out.data(), !a.scalar);
          if (!rs.ok()) Fail(std::string(rs.message()));
          result.insert(result.end(), out.begin(), out.end());
        }
      }
    }
  } else if (a.command == "crop" || a.command == "run") {
    conveyor::SampleTransformer transformer(!a.scalar);
    std::vector<uint8_t> out(conveyor::SampleBytes(a.spec));
    auto emit = [&](const absl::Status& s) {
      if (!s.ok()) Fail(std::string(s.message()));
      PrintTrace(transformer.last(), a.spec);
      result.insert(result.end(), out.begin(), out.end());
    };
    if (a.command == "crop") {
      for (const std::vector<long>& c : NumberLists(a.crops)) {
        if (c.size() < 4) Fail("--crops entries are t,l,h,w[,flip[,d]]");
        CropBox box{static_cast<int>(c[0]), static_cast<int>(c[1]), static_cast<int>(c[2]),
                    static_cast<int>(c[3])};
        const bool flip = c.size() > 4 && c[4] != 0;
        const int d = c.size() > 5 ? static_cast<int>(c[5]) : 0;
        emit(transformer.RunCrop(bytes, a.spec, box, flip, d, out.data()));
      }
    } else {
      for (int k = 0; k < a.count; ++k) {
        conveyor::Rng rng = conveyor::Rng::ForKeys(a.seed, 0, a.index + k);
        emit(transformer.Run(bytes, a.spec, rng, out.data()));
      }
    }
  } else {
    Fail("unknown command " + a.command);
  }

  FILE* f = a.out == "-" ? stdout : std::fopen(a.out.c_str(), "wb");
  if (f == nullptr) Fail("cannot write " + a.out);
  if (!result.empty() && std::fwrite(result.data(), 1, result.size(), f) != result.size()) {
    Fail("short write to " + a.out);
  }
  if (f != stdout) std::fclose(f);
  return 0;
}
