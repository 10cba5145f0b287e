// affine_ops_tool: applies one TrivialAugmentWide geometric op (core/decode/affine_ops.h) to a raw
// image from the command line so the Python tests can compare it with torchvision on PIL images.
//
//   affine_ops_tool OP WIDTH HEIGHT IN.raw OUT.raw MAGNITUDE[,MAGNITUDE...]
//       OP is shear_x, shear_y, translate_x, translate_y or rotate; IN.raw holds exactly
//       WIDTH x HEIGHT packed RGB pixels (row after row, 3 bytes each) and OUT.raw receives the
//       same layout after ApplyAffineOp(OP, MAGNITUDE). MAGNITUDE is the signed value _apply_op
//       gets (a shear factor, pixels, or degrees), read as a double (print it with repr()).
//       With several magnitudes each is applied to IN.raw and the outputs are concatenated
//       (one process for a whole sweep).
// Errors go to stderr with exit status 2.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/decode/affine_ops.h"
#include "tests/support/tool_files.h"

namespace {

using conveyor::AffineOp;

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "affine_ops_tool: %s\n", msg.c_str());
  std::exit(2);
}

AffineOp ParseOp(const std::string& name) {
  if (name == "shear_x") return AffineOp::kShearX;
  if (name == "shear_y") return AffineOp::kShearY;
  if (name == "translate_x") return AffineOp::kTranslateX;
  if (name == "translate_y") return AffineOp::kTranslateY;
  if (name == "rotate") return AffineOp::kRotate;
  Fail("unknown op '" + name + "' (shear_x, shear_y, translate_x, translate_y, rotate)");
}

int ParseSize(const char* text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 1 || v > (1L << 20)) {
    Fail(std::string("bad ") + what + " '" + text + "' (1 to 1048576)");
  }
  return static_cast<int>(v);
}

std::vector<double> ParseMagnitudes(const std::string& list) {
  std::vector<double> values;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(item.c_str(), &end);
    if (errno == ERANGE || end == item.c_str() || *end != '\0') {
      Fail("bad magnitude '" + item + "'");
    }
    values.push_back(v);
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    Fail("usage: affine_ops_tool OP WIDTH HEIGHT IN.raw OUT.raw MAGNITUDE[,MAGNITUDE...]");
  }
  const AffineOp op = ParseOp(argv[1]);
  const int width = ParseSize(argv[2], "width");
  const int height = ParseSize(argv[3], "height");
  const std::vector<double> magnitudes = ParseMagnitudes(argv[6]);
  const std::vector<uint8_t> input = conveyor::testing::ReadFileOrExit("affine_ops_tool", argv[4]);
  const size_t expected = static_cast<size_t>(width) * static_cast<size_t>(height) * 3;
  if (input.size() != expected) {
    Fail(std::string(argv[4]) + " holds " + std::to_string(input.size()) + " bytes, not " +
         std::to_string(expected));
  }
  std::vector<uint8_t> output;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> scratch;
  for (double magnitude : magnitudes) {
    pixels = input;
    conveyor::ApplyAffineOp(conveyor::RgbView{pixels.data(), width, height}, op, magnitude,
                            &scratch);
    output.insert(output.end(), pixels.begin(), pixels.end());
  }
  conveyor::testing::WriteFileOrExit("affine_ops_tool", argv[5], output);
  return 0;
}
