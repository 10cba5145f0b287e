// Images other than JPEG through SampleTransformer (FfmpegImageDecoder):
// hand-built PNG, WebP and GIF files, valid and hostile — truncated, bad
// CRC, huge header dimensions, a decompression bomb, over the memory and
// time budgets, a wrong RIFF size — each refused with a reason naming the
// format; and a good image right after a bad one decodes exactly.
// (Pixel equality with Pillow across formats: tests/python/
// test_image_formats_vs_pil.py.)
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/sample_transformer.h"
#include "core/decode/transform_spec.h"

namespace conveyor {
namespace {

void Be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 3; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void Chunk(std::vector<uint8_t>& png, const char* type, const std::vector<uint8_t>& data) {
  Be32(png, static_cast<uint32_t>(data.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  Be32(png,
       static_cast<uint32_t>(crc32(0, png.data() + start, static_cast<uInt>(png.size() - start))));
}

std::vector<uint8_t> Deflate(const std::vector<uint8_t>& raw, int level = 6) {
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> out(size);
  REQUIRE(compress2(out.data(), &size, raw.data(), static_cast<uLong>(raw.size()), level) == Z_OK);
  out.resize(size);
  return out;
}

// An 8-bit RGB PNG with the given IDAT payload (w, h as declared).
std::vector<uint8_t> PngWithIdat(uint32_t w, uint32_t h, const std::vector<uint8_t>& idat) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  Be32(ihdr, w);
  Be32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  Chunk(png, "IHDR", ihdr);
  Chunk(png, "IDAT", idat);
  Chunk(png, "IEND", {});
  return png;
}

// Pixels of a w x h RGB test image: a pattern, or noise (incompressible).
std::vector<uint8_t> Pixels(int w, int h, bool noise = false) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  Rng rng(7);
  for (size_t i = 0; i < px.size(); ++i) {
    px[i] =
        noise ? static_cast<uint8_t>(rng.NextU64() >> 56) : static_cast<uint8_t>(i * 7 + i / 97);
  }
  return px;
}

std::vector<uint8_t> Png(int w, int h, const std::vector<uint8_t>& px, int level = 6) {
  std::vector<uint8_t> raw;
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);  // filter: none
    raw.insert(raw.end(), px.begin() + static_cast<size_t>(y) * w * 3,
               px.begin() + static_cast<size_t>(y + 1) * w * 3);
  }
  return PngWithIdat(w, h, Deflate(raw, level));
}

// Eval at the image's own size: the output is the decoded pixels (NHWC).
TransformSpec Identity(int side) {
  TransformSpec spec;
  spec.mode = AugmentMode::kEval;
  spec.output_height = spec.output_width = spec.resize_size = side;
  spec.layout = Layout::kNHWC;
  spec.dct_scaling = false;
  return spec;
}

absl::Status Run(SampleTransformer& t, const std::vector<uint8_t>& file, const TransformSpec& spec,
                 std::vector<uint8_t>* out = nullptr) {
  std::vector<uint8_t> buffer(SampleBytes(spec));
  Rng rng(1);
  absl::Status s = t.Run(file, spec, rng, buffer.data());
  if (out != nullptr) *out = buffer;
  return s;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST_CASE("A PNG decodes to its pixels through the JPEG path's transform", "[ffmpeg_image]") {
  SampleTransformer t;
  const std::vector<uint8_t> px = Pixels(24, 24);
  std::vector<uint8_t> out;
  REQUIRE(Run(t, Png(24, 24, px), Identity(24), &out).ok());
  CHECK(out == px);
  CHECK(std::string(t.last().format) == "PNG");
  CHECK(t.last().scale_denom == 1);
}

TEST_CASE("A truncated PNG is refused as truncated PNG data", "[ffmpeg_image]") {
  SampleTransformer t;
  std::vector<uint8_t> png = Png(24, 24, Pixels(24, 24));
  for (size_t keep : {png.size() / 2, png.size() - 5, size_t{20}}) {
    const std::vector<uint8_t> cut(png.begin(), png.begin() + keep);
    const absl::Status s = Run(t, cut, Identity(24));
    INFO(s.ToString());
    CHECK(absl::IsDataLoss(s));
    CHECK(Contains(s, "truncated PNG data"));
  }
}

TEST_CASE("A PNG with a bad CRC is refused as corrupt PNG data", "[ffmpeg_image]") {
  SampleTransformer t;
  std::vector<uint8_t> png = Png(24, 24, Pixels(24, 24));
  png[png.size() - 12 - 1] ^= 0x55;  // the IDAT chunk's CRC (IEND is the last 12 bytes)
  const absl::Status s = Run(t, png, Identity(24));
  INFO(s.ToString());
  CHECK(absl::IsDataLoss(s));
  CHECK(Contains(s, "corrupt or truncated PNG data"));
}

TEST_CASE("Huge PNG header dimensions are refused before decoding", "[ffmpeg_image]") {
  SampleTransformer t;
  const absl::Status s = Run(t, PngWithIdat(70000, 70000, Deflate({0, 1, 2})), Identity(24));
  INFO(s.ToString());
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "PNG image 70000x70000 exceeds max_pixels 67108864");
}

TEST_CASE("A PNG over max_decode_memory is refused from its header", "[ffmpeg_image]") {
  SampleTransformer t;
  TransformSpec spec = Identity(24);
  spec.max_decode_memory = 16ull << 20;
  const absl::Status s = Run(t, PngWithIdat(4000, 4000, Deflate({0, 1, 2})), spec);
  INFO(s.ToString());
  CHECK(absl::IsResourceExhausted(s));
  CHECK(Contains(s, "PNG image 4000x4000 needs about"));
  CHECK(Contains(s, "more than max_decode_memory (16.0 MiB)"));
}

TEST_CASE("A PNG whose IDAT inflates far beyond its rows is refused (zip bomb)", "[ffmpeg_image]") {
  SampleTransformer t;
  // 16x16 pixels need 16 * 49 bytes; the stream holds 256 MiB of zeros.
  const std::vector<uint8_t> zeros(256u << 20, 0);
  const std::vector<uint8_t> bomb = PngWithIdat(16, 16, Deflate(zeros, 9));
  REQUIRE(bomb.size() < 1u << 20);
  // The check runs when the stream could keep FFmpeg's inflate busy for
  // longer than the budget: 256 KiB of deflate may inflate for > 0.5 s.
  TransformSpec spec = Identity(16);
  spec.max_decode_seconds = 0.5;
  const absl::Status s = Run(t, bomb, spec);
  INFO(s.ToString());
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Contains(s, "PNG 16x16: the IDAT stream inflates to more than the image's 784 bytes"));
}

TEST_CASE("max_decode_seconds stops a costly PNG", "[ffmpeg_image]") {
  SampleTransformer t;
  const int side = 2048;  // 12 MiB of incompressible rows: far more than 1 ms of CPU
  TransformSpec spec = Identity(side);
  spec.max_decode_seconds = 0.001;
  const absl::Status s = Run(t, Png(side, side, Pixels(side, side, true), 1), spec);
  INFO(s.ToString());
  CHECK(absl::IsResourceExhausted(s));
  CHECK(Contains(s, "decoding took more than max_decode_seconds (0.001 s of CPU; PNG"));
}

std::vector<uint8_t> LosslessWebpHeader(uint32_t riff_size, size_t file_size) {
  std::vector<uint8_t> b = {'R', 'I', 'F', 'F'};
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(riff_size >> (8 * i)));
  const char rest[] = "WEBPVP8L";
  b.insert(b.end(), rest, rest + 8);
  const uint32_t chunk = static_cast<uint32_t>(file_size - 20);
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(chunk >> (8 * i)));
  b.push_back(0x2F);
  const uint32_t dims = (15u) | (15u << 14);  // 16x16
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(dims >> (8 * i)));
  b.resize(file_size, 0);
  return b;
}

TEST_CASE("A WebP whose RIFF size claims more than the file is refused", "[ffmpeg_image]") {
  SampleTransformer t;
  const absl::Status s = Run(t, LosslessWebpHeader(4000, 64), Identity(16));
  INFO(s.ToString());
  CHECK(absl::IsDataLoss(s));
  CHECK(s.message() == "truncated WebP data (the RIFF header claims 4008 bytes, the file has 64)");
  // A consistent size but garbage bitstream: refused by the decoder, named.
  const absl::Status g = Run(t, LosslessWebpHeader(56, 64), Identity(16));
  INFO(g.ToString());
  CHECK(absl::IsDataLoss(g));
  CHECK(Contains(g, "WebP"));
}

TEST_CASE("A GIF cut inside its first image is refused as truncated", "[ffmpeg_image]") {
  SampleTransformer t;
  // 2x2, global table of 2 colours, image descriptor, LZW data cut short.
  std::vector<uint8_t> gif = {'G', 'I', 'F', '8',  '9', 'a', 2, 0, 2, 0, 0x80, 0, 0, 0, 0, 0,
                              255, 255, 255, 0x2C, 0,   0,   0, 0, 2, 0, 2,    0, 0, 2, 5};
  const absl::Status s = Run(t, gif, Identity(2));
  INFO(s.ToString());
  CHECK(absl::IsDataLoss(s));
  CHECK(s.message() == "truncated GIF data (the first image's data is cut short)");
}

TEST_CASE("Bytes of no supported format are named by their magic", "[ffmpeg_image]") {
  SampleTransformer t;
  const std::string pdf = "%PDF-1.7 and more";
  const absl::Status s = Run(t, std::vector<uint8_t>(pdf.begin(), pdf.end()), Identity(8));
  CHECK(s.message() == "not a supported image format (looks like PDF)");
  const std::string text = "\x1b]0;owned\x07 text";
  CHECK(Run(t, std::vector<uint8_t>(text.begin(), text.end()), Identity(8)).message() ==
        "not a supported image format (unknown format)");
}

TEST_CASE("A good image after bad ones decodes exactly (no state leaks)", "[ffmpeg_image]") {
  SampleTransformer t;
  const std::vector<uint8_t> px = Pixels(24, 24);
  std::vector<uint8_t> png = Png(24, 24, px);
  std::vector<uint8_t> bad = png;
  bad[png.size() - 13] ^= 0x55;
  REQUIRE_FALSE(Run(t, bad, Identity(24)).ok());
  REQUIRE_FALSE(Run(t, std::vector<uint8_t>(png.begin(), png.begin() + 60), Identity(24)).ok());
  std::vector<uint8_t> out;
  REQUIRE(Run(t, png, Identity(24), &out).ok());
  CHECK(out == px);
}

}  // namespace
}  // namespace conveyor
