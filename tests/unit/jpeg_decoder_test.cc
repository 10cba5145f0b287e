// JpegDecoder: region decodes against full decodes, CMYK conversion, and
// clean errors (never a crash, an exit() or a message on stderr) for bad input.
#include "core/decode/jpeg_decoder.h"

#include <jpeglib.h>
#include <stdio.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/base/rng.h"
#include "core/decode/transform_spec.h"
#include "tests/support/costly_jpeg.h"
#include "tests/unit/test_images.h"

namespace conveyor {
namespace {

enum class Flavour { k420, k444, kGray, kCmyk, kProgressive };

// Noise over gradients, so decoding has real work and edges everywhere.
std::vector<uint8_t> Encode(int w, int h, Flavour flavour, uint64_t seed = 1) {
  const int comps = flavour == Flavour::kGray ? 1 : (flavour == Flavour::kCmyk ? 4 : 3);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * comps);
  Rng rng(seed);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < comps; ++c) {
        const int base = (x * 255 / w * (c + 1) + y * 255 / h) % 256;
        px[(static_cast<size_t>(y) * w + x) * comps + c] =
            static_cast<uint8_t>(std::clamp(base + static_cast<int>(rng.Below(48)) - 24, 0, 255));
      }
    }
  }
  return testing::CompressJpeg(px, w, h, comps, 90, [flavour](jpeg_compress_struct* cinfo) {
    if (flavour == Flavour::k444) {
      cinfo->comp_info[0].h_samp_factor = cinfo->comp_info[0].v_samp_factor = 1;
    }
    if (flavour == Flavour::kProgressive) jpeg_simple_progression(cinfo);
  });
}

RgbImage DecodeFull(JpegDecoder& dec, const std::vector<uint8_t>& bytes, int denom = 1) {
  RgbImage img;
  REQUIRE(dec.ReadHeader(bytes, 1ull << 30).ok());
  REQUIRE(dec.DecodeImage(denom, &img).ok());
  return img;
}

std::vector<uint8_t> DecodeRegion(JpegDecoder& dec, const std::vector<uint8_t>& bytes,
                                  const PixelRegion& r, int denom) {
  std::vector<uint8_t> out;
  const size_t row_bytes = static_cast<size_t>(r.x1 - r.x0) * 3;
  REQUIRE(dec.ReadHeader(bytes, 1ull << 30).ok());
  absl::Status s = dec.DecodeRegion(r, denom, [&](const uint8_t* rows, size_t stride, int count) {
    for (int i = 0; i < count; ++i)
      out.insert(out.end(), rows + i * stride, rows + i * stride + row_bytes);
  });
  REQUIRE(s.ok());
  return out;
}

absl::Status TryDecode(JpegDecoder& dec, const std::vector<uint8_t>& bytes,
                       const DecodeLimits& limits) {
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(bytes, limits);
  if (!h.ok()) return h.status();
  RgbImage img;
  return dec.DecodeImage(1, &img);
}

absl::Status TryDecode(JpegDecoder& dec, const std::vector<uint8_t>& bytes,
                       uint64_t max_pixels = 1ull << 26) {
  DecodeLimits limits;
  limits.max_pixels = max_pixels;
  return TryDecode(dec, bytes, limits);
}

// Offset of the SOF0..SOF2 marker, or npos.
size_t FindSof(const std::vector<uint8_t>& b) {
  for (size_t i = 2; i + 1 < b.size(); ++i) {
    if (b[i] == 0xFF && (b[i + 1] == 0xC0 || b[i + 1] == 0xC1 || b[i + 1] == 0xC2)) return i;
  }
  return std::string::npos;
}

}  // namespace

TEST_CASE("jpeg decoder: header fields", "[jpeg]") {
  JpegDecoder dec;
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(Encode(123, 45, Flavour::kGray), 1 << 20);
  REQUIRE(h.ok());
  CHECK(h->width == 123);
  CHECK(h->height == 45);
  CHECK(h->components == 1);
  CHECK(h->color == JpegColor::kGray);
  CHECK_FALSE(h->progressive);
  h = dec.ReadHeader(Encode(64, 48, Flavour::kProgressive), 1 << 20);
  REQUIRE(h.ok());
  CHECK(h->progressive);
  CHECK(h->color == JpegColor::kYCbCr);
  h = dec.ReadHeader(Encode(64, 48, Flavour::kCmyk), 1 << 20);
  REQUIRE(h.ok());
  CHECK(h->components == 4);
}

TEST_CASE("jpeg decoder: scaled sizes round up like libjpeg", "[jpeg]") {
  JpegDecoder dec;
  const std::vector<uint8_t> bytes = Encode(333, 251, Flavour::k420);
  for (int d : {1, 2, 4, 8}) {
    const RgbImage img = DecodeFull(dec, bytes, d);
    CHECK(img.width == (333 + d - 1) / d);
    CHECK(img.height == (251 + d - 1) / d);
  }
}

TEST_CASE("jpeg decoder: region decode equals full decode at every scale", "[jpeg]") {
  JpegDecoder dec;
  Rng rng(99);
  for (Flavour f :
       {Flavour::k420, Flavour::k444, Flavour::kGray, Flavour::kCmyk, Flavour::kProgressive}) {
    const std::vector<uint8_t> bytes = Encode(301, 217, f, 7);
    for (int d : {1, 2, 4, 8}) {
      const RgbImage full = DecodeFull(dec, bytes, d);
      for (int k = 0; k < 12; ++k) {
        PixelRegion r;
        r.x0 = static_cast<int>(rng.Below(full.width - 1));
        if (k < 3) r.x0 -= r.x0 % 16;  // on an iMCU column
        r.x1 = r.x0 + 1 + static_cast<int>(rng.Below(full.width - r.x0));
        r.y0 = static_cast<int>(rng.Below(full.height - 1));
        r.y1 = r.y0 + 1 + static_cast<int>(rng.Below(full.height - r.y0));
        const std::vector<uint8_t> got = DecodeRegion(dec, bytes, r, d);
        bool same = true;
        const size_t row_bytes = static_cast<size_t>(r.x1 - r.x0) * 3;
        for (int y = r.y0; y < r.y1 && same; ++y) {
          same = std::memcmp(got.data() + (y - r.y0) * row_bytes,
                             full.pixels.data() + (static_cast<size_t>(y) * full.width + r.x0) * 3,
                             row_bytes) == 0;
        }
        INFO("flavour " << static_cast<int>(f) << " d " << d << " region [" << r.x0 << "," << r.x1
                        << ")x[" << r.y0 << "," << r.y1 << ")");
        CHECK(same);
      }
    }
  }
}

TEST_CASE("jpeg decoder: CMYK converts as Pillow's CMYK-inverted + cmyk2rgb", "[jpeg]") {
  // Stored (inverted) values -> RGB, from PIL 9.4: ink (128, 0, 5, 60) gives
  // (97, 195, 191); ink (0, 77, 5, 128) gives (127, 89, 125); K ink 255 -> 0.
  const uint8_t in[12] = {127, 255, 250, 195, 255, 178, 250, 127, 10, 20, 30, 0};
  uint8_t out[9];
  CmykToRgb(in, out, 3);
  CHECK(std::vector<int>(out, out + 3) == std::vector<int>{97, 195, 191});
  CHECK(std::vector<int>(out + 3, out + 6) == std::vector<int>{127, 89, 125});
  CHECK(std::vector<int>(out + 6, out + 9) == std::vector<int>{0, 0, 0});
}

TEST_CASE("jpeg decoder: not-a-JPEG inputs are InvalidArgument", "[jpeg]") {
  JpegDecoder dec;
  absl::Status s = TryDecode(dec, {});
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "empty input (0 bytes)");
  s = TryDecode(dec, {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A});
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "not a JPEG (looks like PNG)");
  s = TryDecode(dec, {0xFF});
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "not a JPEG (1 byte, unknown format)");
  Rng rng(3);
  std::vector<uint8_t> noise(4096);
  for (auto& b : noise) b = static_cast<uint8_t>(rng.Below(256));
  noise[0] = 0x12;
  CHECK(absl::IsInvalidArgument(TryDecode(dec, noise)));
  // Random bytes behind a valid SOI: a libjpeg error, reported, not exit().
  noise[0] = 0xFF;
  noise[1] = 0xD8;
  CHECK_FALSE(TryDecode(dec, noise).ok());
}

TEST_CASE("jpeg decoder: other formats are named by their magic bytes, never echoed", "[jpeg]") {
  auto reason = [](const std::string& content) {
    JpegDecoder dec;
    const std::vector<uint8_t> bytes(content.begin(), content.end());
    const absl::Status s = TryDecode(dec, bytes);
    CHECK(absl::IsInvalidArgument(s));
    return std::string(s.message());
  };
  CHECK(reason("GIF89a\x01\x00") == "not a JPEG (looks like GIF)");
  CHECK(reason(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)) == "not a JPEG (looks like WebP)");
  CHECK(reason(std::string("BM\x36\x10\x0e\0", 6)) == "not a JPEG (looks like BMP)");
  CHECK(reason(std::string("II*\0\x08\0\0\0", 8)) == "not a JPEG (looks like TIFF)");
  CHECK(reason(std::string("MM\0*\0\0\0\x08", 8)) == "not a JPEG (looks like TIFF)");
  CHECK(reason("P6\n4 4\n255\n") == "not a JPEG (looks like PNM (PPM/PGM/PBM))");
  CHECK(reason(std::string("\0\0\0\x1c"
                           "ftypavif",
                           12)) == "not a JPEG (looks like AVIF/HEIF)");
  CHECK(reason("%PDF-1.7") == "not a JPEG (looks like PDF)");
  CHECK(reason("PK\x03\x04....") == "not a JPEG (looks like ZIP)");
  CHECK(reason("\x1f\x8b\x08\x00") == "not a JPEG (looks like gzip)");
  // Anything else is an unknown format, and the bytes are never shown:
  // not even a name-like or terminal-escape prefix of the file.
  CHECK(reason("rm -rf /\n") == "not a JPEG (unknown format)");
  CHECK(reason("\x1b]0;owned\x07") == "not a JPEG (unknown format)");
}

TEST_CASE("jpeg decoder: truncated files are DataLoss at every cut", "[jpeg]") {
  JpegDecoder dec;
  for (Flavour f : {Flavour::k420, Flavour::kProgressive}) {
    const std::vector<uint8_t> bytes = Encode(160, 120, f);
    for (size_t cut = 2; cut < bytes.size() - 1; cut += 1 + cut / 8) {
      const std::vector<uint8_t> part(bytes.begin(), bytes.begin() + cut);
      const absl::Status s = TryDecode(dec, part);
      INFO("cut at " << cut << " of " << bytes.size() << ": " << s.ToString());
      CHECK(absl::IsDataLoss(s));
    }
  }
  // A cut inside the scan data says so plainly.
  const std::vector<uint8_t> bytes = Encode(160, 120, Flavour::k420);
  const std::vector<uint8_t> half(bytes.begin(), bytes.begin() + bytes.size() / 2);
  CHECK(TryDecode(dec, half).message().find("truncated JPEG data") != std::string::npos);
}

TEST_CASE("jpeg decoder: corrupt scan bytes never crash and usually fail", "[jpeg]") {
  JpegDecoder dec;
  const std::vector<uint8_t> bytes = Encode(200, 150, Flavour::k420);
  const RgbImage clean = DecodeFull(dec, bytes);
  Rng rng(17);
  int failed = 0;
  const int trials = 300;
  for (int t = 0; t < trials; ++t) {
    std::vector<uint8_t> bad = bytes;
    // Corrupt a run of bytes somewhere after the headers (the first ~600 bytes).
    const size_t at = 700 + rng.Below(bad.size() - 800);
    for (size_t i = 0; i < 8; ++i) bad[at + i] = static_cast<uint8_t>(rng.Below(256));
    const absl::Status s = TryDecode(dec, bad);
    if (!s.ok()) {
      ++failed;
      INFO(s.ToString());
      CHECK(absl::IsDataLoss(s));
    }
  }
  // Huffman data has no redundancy: most corruptions decode to other pixels
  // and only those that produce an invalid code or run into a marker are
  // detectable (leftover bytes after the last MCU would need reading to the
  // end-of-image marker, which a cropped decode never does). Measured: ~5%.
  CHECK(failed > 0);
  // The decoder is fine afterwards.
  CHECK(DecodeFull(dec, bytes).pixels == clean.pixels);
}

TEST_CASE("jpeg decoder: huge declared dimensions are refused before allocation", "[jpeg]") {
  JpegDecoder dec;
  std::vector<uint8_t> bytes = Encode(64, 48, Flavour::k420);
  const size_t sof = FindSof(bytes);
  REQUIRE(sof != std::string::npos);
  // SOF: FF C0, length(2), precision(1), height(2), width(2).
  bytes[sof + 5] = 60000 >> 8;
  bytes[sof + 6] = 60000 & 0xFF;
  bytes[sof + 7] = 60000 >> 8;
  bytes[sof + 8] = 60000 & 0xFF;
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(bytes, 64ull * 1024 * 1024);
  REQUIRE_FALSE(h.ok());
  CHECK(absl::IsInvalidArgument(h.status()));
  CHECK(h.status().message() == "image 60000x60000 exceeds max_pixels 67108864");
  // Within max_pixels the lie is found when the data runs out.
  CHECK(absl::IsDataLoss(TryDecode(dec, bytes, 1ull << 32)));
  // Zero dimensions are a libjpeg error.
  bytes[sof + 5] = bytes[sof + 6] = 0;
  CHECK_FALSE(TryDecode(dec, bytes).ok());
}

TEST_CASE("jpeg decoder: absurd progressive scan counts are refused", "[jpeg]") {
  // A valid grayscale progressive script with 704 scans: DC and every AC
  // coefficient on its own, each first at Al = 10 then refined bit by bit.
  const std::vector<uint8_t> bytes = testing::ManyScanGrayJpeg(32, 24);
  JpegDecoder dec;
  const absl::Status s = TryDecode(dec, bytes);
  CHECK(absl::IsDataLoss(s));
  CHECK(s.message() == "corrupt JPEG data: more than 500 progressive scans");
}

TEST_CASE("jpeg decoder: misuse is reported", "[jpeg]") {
  JpegDecoder dec;
  RgbImage img;
  CHECK(absl::IsFailedPrecondition(dec.DecodeImage(1, &img)));
  const std::vector<uint8_t> bytes = Encode(64, 48, Flavour::k420);
  REQUIRE(dec.ReadHeader(bytes, 1 << 20).ok());
  CHECK(absl::IsInvalidArgument(dec.DecodeRegion({0, 0, 65, 10}, 1, [](auto, auto, auto) {})));
  REQUIRE(dec.ReadHeader(bytes, 1 << 20).ok());
  CHECK(absl::IsInvalidArgument(dec.DecodeRegion({0, 0, 8, 8}, 3, [](auto, auto, auto) {})));
  // One decode per header.
  REQUIRE(dec.ReadHeader(bytes, 1 << 20).ok());
  REQUIRE(dec.DecodeImage(1, &img).ok());
  CHECK(absl::IsFailedPrecondition(dec.DecodeImage(1, &img)));
}

}  // namespace conveyor

namespace conveyor {
namespace {

// After every way an image can end early, the same decoder decodes the next
// image exactly as a fresh one does (the image in progress was released).
TEST_CASE("jpeg decoder: every early end leaves the decoder ready for the next image", "[jpeg]") {
  const std::vector<uint8_t> good = Encode(96, 64, Flavour::k420);
  const std::vector<uint8_t> other = Encode(40, 72, Flavour::k444);
  RgbImage want;
  {
    JpegDecoder fresh;
    REQUIRE(fresh.ReadHeader(good, 1 << 20).ok());
    REQUIRE(fresh.DecodeImage(1, &want).ok());
  }
  std::vector<uint8_t> corrupt_scan = good;
  for (size_t i = corrupt_scan.size() / 2; i < corrupt_scan.size() - 2; i += 7) {
    corrupt_scan[i] = 0xFF;  // markers inside entropy-coded data
  }
  std::vector<uint8_t> bad_header = good;
  bad_header[FindSof(good) + 2] = 0xFF;  // SOF length garbage
  const std::vector<uint8_t> no_eoi(good.begin(), good.end() - 2);
  auto noop = [](const uint8_t*, size_t, int) {};

  JpegDecoder dec;
  const std::vector<std::function<void()>> early_ends = {
      [&] { CHECK_FALSE(dec.ReadHeader(bad_header, 1 << 20).ok()); },
      [&] { CHECK_FALSE(dec.ReadHeader(good, 16).ok()); },  // too many pixels
      [&] { CHECK(absl::IsDataLoss(dec.ReadHeader(no_eoi, 1 << 20).status())); },
      [&] {
        REQUIRE(dec.ReadHeader(good, 1 << 20).ok());
        CHECK(absl::IsInvalidArgument(dec.DecodeRegion({0, 0, 8, 8}, 3, noop)));
      },
      [&] {
        REQUIRE(dec.ReadHeader(good, 1 << 20).ok());
        CHECK(absl::IsInvalidArgument(dec.DecodeRegion({0, 0, 97, 8}, 1, noop)));
      },
      [&] {
        if (dec.ReadHeader(corrupt_scan, 1 << 20).ok()) {
          RgbImage img;
          (void)dec.DecodeImage(1, &img);
        }
      },
      [&] { REQUIRE(dec.ReadHeader(other, 1 << 20).ok()); },  // read, never decoded
      [&] {
        REQUIRE(dec.ReadHeader(other, 1 << 20).ok());
        CHECK(dec.DecodeRegion({4, 4, 20, 20}, 2, noop).ok());  // rows below left undecoded
      },
  };
  for (size_t i = 0; i < early_ends.size(); ++i) {
    INFO("early end " << i);
    early_ends[i]();
    RgbImage got;
    REQUIRE(dec.ReadHeader(good, 1 << 20).ok());
    REQUIRE(dec.DecodeImage(1, &got).ok());
    CHECK(got.pixels == want.pixels);
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// `jpeg` without its marker segments of type `marker` (0xDB: DQT, 0xC4: DHT)
// that come before the first scan.
std::vector<uint8_t> StripSegments(const std::vector<uint8_t>& jpeg, uint8_t marker) {
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + 2);  // SOI
  size_t i = 2;
  while (i + 4 <= jpeg.size() && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA) {
    const size_t len = (static_cast<size_t>(jpeg[i + 2]) << 8) | jpeg[i + 3];
    if (jpeg[i + 1] != marker) out.insert(out.end(), jpeg.begin() + i, jpeg.begin() + i + 2 + len);
    i += 2 + len;
  }
  out.insert(out.end(), jpeg.begin() + i, jpeg.end());  // SOS, scan data, EOI
  return out;
}

size_t CountSegments(const std::vector<uint8_t>& jpeg, uint8_t marker) {
  size_t n = 0;
  for (size_t i = 2; i + 4 <= jpeg.size() && jpeg[i] == 0xFF && jpeg[i + 1] != 0xDA;
       i += 2 + ((static_cast<size_t>(jpeg[i + 2]) << 8) | jpeg[i + 3])) {
    n += jpeg[i + 1] == marker;
  }
  return n;
}

struct Outcome {
  absl::Status status;
  std::vector<uint8_t> pixels;
};

Outcome DecodeOutcome(JpegDecoder& dec, const std::vector<uint8_t>& bytes) {
  Outcome o;
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(bytes, 1 << 20);
  if (!h.ok()) {
    o.status = h.status();
    return o;
  }
  RgbImage img;
  o.status = dec.DecodeImage(1, &img);
  o.pixels = std::move(img.pixels);
  return o;
}

// A decoder that decoded other images first treats an image exactly as a
// fresh decoder does: no quantization or Huffman table of an earlier image
// is carried over (a file without DQT is refused, one without DHT gets the
// standard tables, as on a fresh libjpeg decompressor).
TEST_CASE("jpeg decoder: no table state is carried from one image to the next", "[jpeg]") {
  // The image decoded first: other quantization tables (quality 30) and
  // optimized Huffman tables, so whatever it leaves behind differs from the
  // standard tables.
  const std::vector<uint8_t> first = [] {
    std::vector<uint8_t> px(64 * 48 * 3);
    Rng rng(7);
    for (uint8_t& v : px) v = static_cast<uint8_t>(rng.Below(256));
    return testing::CompressJpeg(px, 64, 48, 3, 30,
                                 [](jpeg_compress_struct* c) { c->optimize_coding = TRUE; });
  }();
  const std::vector<uint8_t> good = Encode(80, 56, Flavour::k420, 3);  // standard Huffman tables
  REQUIRE(CountSegments(good, 0xDB) > 0);
  REQUIRE(CountSegments(good, 0xC4) > 0);
  const std::vector<uint8_t> no_dqt = StripSegments(good, 0xDB);
  const std::vector<uint8_t> no_dht = StripSegments(good, 0xC4);
  REQUIRE(CountSegments(no_dqt, 0xDB) == 0);
  REQUIRE(CountSegments(no_dht, 0xC4) == 0);

  for (const auto& [name, bytes] : {std::pair{"no DQT", no_dqt}, std::pair{"no DHT", no_dht}}) {
    INFO(name);
    JpegDecoder fresh;
    const Outcome alone = DecodeOutcome(fresh, bytes);
    JpegDecoder used;
    REQUIRE(DecodeOutcome(used, first).status.ok());
    REQUIRE(DecodeOutcome(used, good).status.ok());
    REQUIRE(DecodeOutcome(used, first).status.ok());
    const Outcome after = DecodeOutcome(used, bytes);
    CHECK(after.status.ok() == alone.status.ok());
    CHECK((after.pixels == alone.pixels));
    // And the fresh decoder's own outcome: no DQT is refused (djpeg refuses
    // it too); no DHT decodes with the standard tables, which `good` uses.
    if (std::string(name) == "no DQT") {
      CHECK_FALSE(alone.status.ok());
      CHECK_FALSE(after.status.ok());
    } else {
      JpegDecoder ref;
      CHECK(alone.status.ok());
      CHECK((alone.pixels == DecodeOutcome(ref, good).pixels));
    }
  }
}

}  // namespace
}  // namespace conveyor

namespace conveyor {
namespace {

// The SOF of `bytes` rewritten to declare w×h (the scan data stays that of
// the real, smaller image: enough for everything ReadHeader looks at).
std::vector<uint8_t> WithDeclaredSize(std::vector<uint8_t> bytes, int w, int h) {
  const size_t sof = FindSof(bytes);
  REQUIRE(sof != std::string::npos);
  bytes[sof + 5] = static_cast<uint8_t>(h >> 8);
  bytes[sof + 6] = static_cast<uint8_t>(h & 0xFF);
  bytes[sof + 7] = static_cast<uint8_t>(w >> 8);
  bytes[sof + 8] = static_cast<uint8_t>(w & 0xFF);
  return bytes;
}

DecodeLimits PipelineDefaults() {
  const TransformSpec spec;
  DecodeLimits limits;
  limits.max_pixels = spec.max_pixels;
  limits.max_memory = spec.max_decode_memory;
  limits.max_cpu_seconds = spec.max_decode_seconds;
  return limits;
}

TEST_CASE(
    "jpeg decoder: a progressive image needing more than max_memory is refused from its header",
    "[jpeg][limits]") {
  // 1024x1024 4:4:4 progressive: 3 x 16384 blocks of 128 bytes = 6 MiB of
  // coefficients.
  const std::vector<uint8_t> bytes = testing::Progressive444Jpeg(1024, 1024);
  JpegDecoder dec;
  DecodeLimits limits;
  limits.max_memory = 4u << 20;
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(bytes, limits);
  REQUIRE_FALSE(h.ok());
  CHECK(absl::IsResourceExhausted(h.status()));
  INFO(h.status().message());
  CHECK(h.status().message().find("image 1024x1024 (progressive, 3 components) needs about 6.") ==
        0);
  CHECK(h.status().message().find("more than max_decode_memory (4.0 MiB)") != std::string::npos);
  // With room for it, the same file decodes, and the estimate covers the
  // coefficient buffer.
  limits.max_memory = 16u << 20;
  REQUIRE(dec.ReadHeader(bytes, limits).ok());
  CHECK(dec.EstimateDecodeMemory() >= 6u << 20);
  CHECK(dec.EstimateDecodeMemory() < 8u << 20);
  RgbImage img;
  CHECK(dec.DecodeImage(1, &img).ok());
}

TEST_CASE("jpeg decoder: the pipeline defaults refuse a progressive 4:4:4 image at max_pixels",
          "[jpeg][limits]") {
  // 8192x8192 is exactly the default max_pixels; progressive 4:4:4 it needs
  // 384 MiB of coefficients, which libjpeg would allocate in
  // jpeg_start_decompress. Refused from the header, nothing allocated.
  const std::vector<uint8_t> bytes =
      WithDeclaredSize(testing::Progressive444Jpeg(64, 64), 8192, 8192);
  JpegDecoder dec;
  absl::StatusOr<JpegHeader> h = dec.ReadHeader(bytes, PipelineDefaults());
  REQUIRE_FALSE(h.ok());
  CHECK(absl::IsResourceExhausted(h.status()));
  INFO(h.status().message());
  CHECK(h.status().message().find("needs about 38") != std::string::npos);
  CHECK(h.status().message().find("max_decode_memory (128.0 MiB)") != std::string::npos);
  // A baseline image of the same size needs only rows of blocks: allowed.
  const std::vector<uint8_t> baseline = WithDeclaredSize(Encode(64, 64, Flavour::k444), 8192, 8192);
  REQUIRE(dec.ReadHeader(baseline, PipelineDefaults()).ok());
  CHECK(dec.EstimateDecodeMemory() < 16u << 20);
}

TEST_CASE("jpeg decoder: a decode over its CPU budget stops with an error naming the budget",
          "[jpeg][limits]") {
  // 2304x2304 grayscale with 704 scans: decoding to libjpeg's scan limit
  // walks 500 x 82944 blocks, about half a second of CPU (measured 12 ns a
  // block and scan); the budget is a tenth of that, counted in CPU time of
  // this thread, so a loaded machine cannot make it pass.
  const std::vector<uint8_t> bytes = testing::ManyScanGrayJpeg(2304, 2304);
  JpegDecoder dec;
  DecodeLimits limits;
  limits.max_cpu_seconds = 0.05;
  const absl::Status s = TryDecode(dec, bytes, limits);
  CHECK(absl::IsResourceExhausted(s));
  CHECK(s.message().find(
            "decoding took more than max_decode_seconds (0.05 s of CPU; stopped in scan ") == 0);
  // The decoder is ready for the next image, with a fresh budget.
  const std::vector<uint8_t> good = Encode(96, 64, Flavour::kProgressive);
  CHECK(TryDecode(dec, good, limits).ok());
}

}  // namespace
}  // namespace conveyor
