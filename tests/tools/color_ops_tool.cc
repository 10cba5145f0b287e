// color_ops_tool: applies one colour op (core/decode/color_ops.h) to a raw RGB image from the
// command line so the Python tests can compare it with torchvision on PIL images.
//
//   color_ops_tool OP WIDTH HEIGHT IN.raw OUT.raw [PARAM...]
//       IN.raw holds exactly WIDTH x HEIGHT packed RGB pixels (row after row, 3 bytes each);
//       OUT.raw receives the same layout after the op. OP and its parameters:
//         brightness F | contrast F | saturation F | sharpness F   (blend factor)
//         hue F                    (-0.5 <= F <= 0.5)
//         grayscale | autocontrast | equalize
//         posterize BITS           (0 to 8)
//         solarize T               (bytes >= T are inverted)
//         blur KW KH SX SY         (odd kernel sizes, KW / 2 < WIDTH, KH / 2 < HEIGHT, sigmas > 0)
//       Numbers are read as doubles (print them with repr()). The tool checks the preconditions
//       the ops document, as a caller must.
// Errors go to stderr with exit status 2.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/decode/color_ops.h"
#include "tests/support/tool_files.h"

namespace {

using conveyor::RgbView;

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "color_ops_tool: %s\n", msg.c_str());
  std::exit(2);
}

long ParseInteger(const char* text, const char* what, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    Fail(std::string("bad ") + what + " '" + text + "' (" + std::to_string(lo) + " to " +
         std::to_string(hi) + ")");
  }
  return v;
}

double ParseReal(const char* text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno == ERANGE || end == text || *end != '\0' || !std::isfinite(v)) {
    Fail(std::string("bad ") + what + " '" + text + "'");
  }
  return v;
}

// The op's parameters after OUT.raw.
struct Params {
  int count;
  char** values;

  void Expect(const std::string& op, int n, const char* usage) const {
    if (count != n) Fail(op + " takes " + usage);
  }
};

void ApplyBlur(RgbView image, const Params& params) {
  params.Expect("blur", 4, "KW KH SX SY");
  const int kw = static_cast<int>(ParseInteger(params.values[0], "KW", 1, 1L << 20));
  const int kh = static_cast<int>(ParseInteger(params.values[1], "KH", 1, 1L << 20));
  const double sx = ParseReal(params.values[2], "SX");
  const double sy = ParseReal(params.values[3], "SY");
  if (kw % 2 == 0 || kh % 2 == 0) Fail("blur kernel sizes must be odd");
  if (kw / 2 >= image.width || kh / 2 >= image.height) {
    Fail("blur kernel too large for reflect padding (KW / 2 < WIDTH, KH / 2 < HEIGHT)");
  }
  if (!(sx > 0.0) || !(sy > 0.0) || sx > 3.0e38 || sy > 3.0e38) {
    Fail("blur sigmas must be > 0 (and within float range)");
  }
  std::vector<float> scratch;
  conveyor::GaussianBlur(image, kw, kh, sx, sy, &scratch);
}

double BlendFactor(const std::string& op, const Params& params) {
  params.Expect(op, 1, "one factor");
  const double factor = ParseReal(params.values[0], "factor");
  if (std::fabs(factor) > 3.0e38) Fail("factor out of float range");
  return factor;
}

void Apply(const std::string& op, RgbView image, const Params& params) {
  if (op == "brightness") {
    conveyor::AdjustBrightness(image, BlendFactor(op, params));
  } else if (op == "contrast") {
    conveyor::AdjustContrast(image, BlendFactor(op, params));
  } else if (op == "saturation") {
    conveyor::AdjustSaturation(image, BlendFactor(op, params));
  } else if (op == "sharpness") {
    std::vector<uint8_t> scratch;
    conveyor::AdjustSharpness(image, BlendFactor(op, params), &scratch);
  } else if (op == "hue") {
    params.Expect(op, 1, "one factor");
    const double factor = ParseReal(params.values[0], "hue factor");
    if (!(factor >= -0.5 && factor <= 0.5)) Fail("hue factor must be in [-0.5, 0.5]");
    conveyor::AdjustHue(image, factor);
  } else if (op == "grayscale") {
    params.Expect(op, 0, "no parameters");
    conveyor::ToGrayscale(image);
  } else if (op == "posterize") {
    params.Expect(op, 1, "BITS");
    conveyor::Posterize(image, static_cast<int>(ParseInteger(params.values[0], "bits", 0, 8)));
  } else if (op == "solarize") {
    params.Expect(op, 1, "a threshold");
    conveyor::Solarize(image, ParseReal(params.values[0], "threshold"));
  } else if (op == "autocontrast") {
    params.Expect(op, 0, "no parameters");
    conveyor::AutoContrast(image);
  } else if (op == "equalize") {
    params.Expect(op, 0, "no parameters");
    conveyor::Equalize(image);
  } else if (op == "blur") {
    ApplyBlur(image, params);
  } else {
    Fail("unknown op '" + op +
         "' (brightness, contrast, saturation, hue, grayscale, sharpness, posterize, solarize, "
         "autocontrast, equalize, blur)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) Fail("usage: color_ops_tool OP WIDTH HEIGHT IN.raw OUT.raw [PARAM...]");
  const std::string op = argv[1];
  const int width = static_cast<int>(ParseInteger(argv[2], "width", 1, 1L << 20));
  const int height = static_cast<int>(ParseInteger(argv[3], "height", 1, 1L << 20));
  std::vector<uint8_t> pixels = conveyor::testing::ReadFileOrExit("color_ops_tool", argv[4]);
  const size_t expected = static_cast<size_t>(width) * static_cast<size_t>(height) * 3;
  if (pixels.size() != expected) {
    Fail(std::string(argv[4]) + " holds " + std::to_string(pixels.size()) + " bytes, not " +
         std::to_string(expected));
  }
  const RgbView image{pixels.data(), width, height};
  Apply(op, image, Params{argc - 6, argv + 6});
  conveyor::testing::WriteFileOrExit("color_ops_tool", argv[5], pixels);
  return 0;
}
