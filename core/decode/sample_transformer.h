// SampleTransformer: the per-sample hot path of the engine. Decodes one image
// (JPEG through JpegDecoder; PNG, GIF, WebP, BMP and TIFF through
// FfmpegImageDecoder, chosen by the file's magic bytes) and applies a
// TransformSpec (torchvision's RandomResizedCrop + horizontal
// flip for train, Resize + CenterCrop for eval, then ToTensor/Normalize-style
// conversion), writing the sample straight into its place in the batch.
//
// Both decoders hand the same crop/resize/flip/convert code rows of RGB.
// Only what the output needs is decoded (JPEG) or converted (the others): the
// crop's columns and rows (see JpegDecoder), at the smallest DCT scale 1/d (d in 1, 2, 4, 8) that
// keeps the crop at least as large as the output when spec.dct_scaling is set. At d = 1 the result
// equals torchvision on a PIL image byte for byte (decode as PIL, Pillow's resampler bit-exact,
// same flip, float32 normalisation computed as torchvision does); at d > 1 it differs by the
// DCT-domain downscale (see "Decode accuracy" in bench/README.md for measured figures).
//
// A baseline JPEG with a restart marker after every MCU (a re-laid copy,
// core/decode/jpeg_relayout.h) decodes the region with the copy's own
// entropy decoder (core/decode/relaid_entropy_decoder.h), which decodes only
// the MCUs libjpeg transforms, straight from their intervals; one whose
// intervals span several MCUs and tile its rows decodes it from a smaller
// JPEG of the intervals that cover it and the pixel beside it. The same
// pixels either way, without entropy-decoding the rows above the crop and
// the columns beside it.
//
// The engine's default SampleDecoder (core/decode/sample_decoder.h).
//
// Thread-safety: not thread-safe; one SampleTransformer per worker thread.
// It keeps the libjpeg decompressor and all scratch buffers between samples,
// so after warm-up no sample allocates (libjpeg's own per-image pool aside).
// The FFmpeg decoder is made on the first image that needs it.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/base/rng.h"
#include "core/decode/crop_box.h"
#include "core/decode/ffmpeg_image_decoder.h"
#include "core/decode/jpeg_decoder.h"
#include "core/decode/jpeg_relayout.h"
#include "core/decode/resize.h"
#include "core/decode/rgb_view.h"
#include "core/decode/sample_decoder.h"
#include "core/decode/transform_spec.h"
#include "core/decode/trivial_augment.h"

namespace conveyor {

// Largest d in {1, 2, 4, 8} with src_w / d >= out_w and src_h / d >= out_h
// (1 when even the full-size source is smaller than the output).
int ChooseScaleDenom(double src_w, double src_h, int out_w, int out_h);

// IEEE 754 binary32 -> binary16 bits, round to nearest, ties to even
// (overflow to infinity, NaN kept quiet). Matches torch's .half().
uint16_t FloatToHalf(float f);

// What a sample drew for the whole-image ops (TransformSpec::image_ops),
// in the order they were drawn: the padding's window, the colour jitter
// (whether applied, the order of its four adjustments, their factors), the
// blur's sigma, TrivialAugmentWide's op and signed magnitude.
struct ImageOpsDraws {
  int pad_top = 0, pad_left = 0;  // the window's offset in the padded image
  bool jitter = false;
  std::array<int, 4> jitter_order = {0, 1, 2, 3};  // 0 brightness 1 contrast 2 saturation 3 hue
  double brightness = 1, contrast = 1, saturation = 1, hue = 0;  // identity when not drawn
  bool blur = false;
  double blur_sigma = 0;
  bool trivial_augment = false;
  TrivialAugmentDraw trivial;
};

// Draws what `ops` asks for, from `rng`, in the order: padding window (top,
// left), jitter (apply, permutation, brightness, contrast, saturation, hue,
// each only when its range is not the identity), blur (apply, sigma),
// TrivialAugmentWide (op, bin, sign).
ImageOpsDraws DrawImageOps(const ImageOpsSpec& ops, Rng& rng);

// The draws as one JSON object, e.g. {"pad":[3,1],"jitter":{...},...}: only
// the ops that are on (for tools and the `augment` debug field).
std::string ImageOpsDrawsJson(const ImageOpsSpec& ops, const ImageOpsDraws& draws);

class SampleTransformer final : public SampleDecoder {
 public:
  // What the last successful Run did; for tests, tools and statistics.
  struct Trace {
    int image_width = 0;  // full-resolution image
    int image_height = 0;
    CropBox crop;           // train: the crop box in full-resolution pixels
    bool fallback = false;  // train: RandomResizedCrop used its centre fallback
    EvalWindow window;      // eval: the resize + centre-crop window
    bool flip = false;
    bool vflip = false;      // the vertical flip drawn (vflip_probability)
    bool grayscale = false;  // the grayscale drawn (grayscale_probability)
    // The whole-image ops' draws (ImageOpsDraws), when the spec has any;
    // the whole-image path applies what this says.
    ImageOpsDraws ops;
    int scale_denom = 1;      // DCT scale 1/scale_denom used for decoding (JPEG only)
    const char* format = "";  // ImageFormatName of the image
    PixelRegion decoded;      // region decoded, in scaled-image pixels
    // JPEG: the region was decoded from only the restart intervals that
    // cover it (a re-laid JPEG, core/decode/jpeg_relayout.h).
    bool from_intervals = false;
  };

  SampleTransformer();
  // allow_simd = false forces the portable resampling kernels.
  explicit SampleTransformer(bool allow_simd);
  ~SampleTransformer() override;
  SampleTransformer(const SampleTransformer&) = delete;
  SampleTransformer& operator=(const SampleTransformer&) = delete;

  // Decodes `bytes` (an image file) and applies `spec` using draws from `rng`
  // (train: crop box then flip, in that order; eval draws nothing), writing
  // exactly SampleBytes(spec) bytes at `out` in spec.layout / spec.dtype.
  // Errors (the caller adds the sample name): InvalidArgument for input that
  // is in no format decoded here ("not a supported image format (looks like
  // PDF)"), is empty or too large (max_pixels) or for a bad spec; DataLoss for
  // truncated or corrupt data, naming the format; ResourceExhausted when
  // decoding would need more than max_decode_memory or took more than
  // max_decode_seconds of CPU. `out` is unspecified on error.
  // REQUIRES: spec passed ValidateTransformSpec (checked again, cheaply);
  // out has SampleBytes(spec) writable bytes, aligned to ElementSize(dtype).
  absl::Status Run(std::span<const uint8_t> bytes, const TransformSpec& spec, Rng& rng,
                   uint8_t* out) override;

  // Train mode with the geometry given instead of drawn (tools, tests): the
  // crop box in full-resolution pixels, the flip, and the DCT scale
  // denominator (0: chosen as Run chooses it; 1, 2, 4, 8: forced; images
  // other than JPEG always decode at full size). Crop boxes
  // that do not fit the image give InvalidArgument.
  absl::Status RunCrop(std::span<const uint8_t> bytes, const TransformSpec& spec,
                       const CropBox& crop, bool flip, int scale_denom, uint8_t* out);

  const Trace& last() const { return trace_; }
  const SampleGeometry* LastGeometry() const override { return &geometry_; }
  // {"crop": [top, left, height, width], "flip": …, "vflip": …, "grayscale": …,
  // then ImageOpsDrawsJson's members} (eval: "window": [resized height,
  // resized width, top, left] instead of the crop and flip).
  bool LastDraws(std::string* out) const override;
  // A mask of the same size as the last image (JPEG or any format here;
  // decoded at full size), its first channel sampled nearest-neighbour.
  // InvalidArgument when its size differs from geometry's source. last()
  // and LastGeometry() still describe the image.
  absl::Status RunMask(std::span<const uint8_t> bytes, const TransformSpec& spec,
                       const SampleGeometry& geometry, uint8_t* out) override;
  // Whether the AVX2 kernels are in use.
  bool simd() const { return resampler_.simd(); }

 private:
  absl::Status Start(std::span<const uint8_t> bytes, const TransformSpec& spec);
  absl::Status RunTrain(const TransformSpec& spec, const CropBox& crop, bool flip, int scale_denom,
                        uint8_t* out);
  absl::Status RunEval(const TransformSpec& spec, uint8_t* out);
  // geometry_ of the current image: source point × scale − offset, then the
  // flips (the horizontal one given, the vertical one drawn).
  void SetGeometry(const TransformSpec& spec, double scale_x, double scale_y, double offset_x,
                   double offset_y, bool flip);
  // Draws the vertical flip and grayscale (only those asked for) into
  // vflip_ / gray_, after the crop and flip draws.
  void DrawPixelOps(const TransformSpec& spec, Rng& rng);
  // The whole-image path (spec.image_ops.any()): the resized rows gathered
  // into image_ through the padding window and flips as the resampler
  // finishes them (edge and reflect padding keep them in resized_ first),
  // the ops applied in place, then image_ converted into the sample.
  void FinishWholeImage(const TransformSpec& spec, bool flip, uint8_t* out);
  // Writes the resampler's rows into the sample, flipped and made grey as
  // asked, in spec's layout and type.
  void WriteOutput(const TransformSpec& spec, bool flip, bool vflip, bool gray, uint8_t* out);
  // The same from any source of rows: rows(sink) calls sink(y, rgb) for
  // every output row.
  template <typename RowSource>
  void WriteRows(const TransformSpec& spec, bool flip, bool vflip, bool gray, uint8_t* out,
                 RowSource&& rows);
  void ApplyImageOps(const TransformSpec& spec, RgbView image);
  // Plans the resampler, decodes the region it reads and writes the output.
  absl::Status Execute(const ResampleAxis& x, int x_origin, const ResampleAxis& y, int y_origin,
                       int scale_denom, const TransformSpec& spec, bool flip, uint8_t* out);
  void PrepareTables(const TransformSpec& spec);

  JpegDecoder decoder_;
  // The current JPEG's bytes and limits, and its restart intervals when
  // they tile its MCU rows (a re-laid JPEG): then a region is decoded from
  // its intervals (one MCU each) or from a smaller JPEG of the intervals it
  // covers (sub_jpeg_), the same pixels.
  std::span<const uint8_t> bytes_;
  DecodeLimits limits_;
  std::optional<RelaidLayout> relaid_;
  std::vector<uint8_t> sub_jpeg_;
  std::unique_ptr<FfmpegImageDecoder> ffmpeg_;  // made on the first non-JPEG image
  bool jpeg_ = true;                            // which decoder has the current image
  Resampler resampler_;
  JpegHeader header_;  // width and height of the current image (any format)
  Trace trace_;
  SampleGeometry geometry_;            // of the last Run, RunCrop (valid after a success)
  std::vector<int> mask_x_, mask_y_;   // RunMask: the source column / row of each output one
  std::vector<uint8_t> mask_resized_;  // RunMask with padding: before the padding and flips
  // A w × h mask at the resized image's place → out, through g's padding
  // (fill 0) and flips.
  static void GatherPadded(const SampleGeometry& g, const uint8_t* mask, uint8_t* out);
  bool vflip_ = false;  // of the current image (DrawPixelOps; RunCrop: none)
  bool gray_ = false;
  std::vector<uint8_t> gray_row_;  // one output row made grey
  ImageOpsSpec ops_spec_;          // the ops of the current image's spec
  bool eval_ = false;              // the current image's mode
  std::vector<uint8_t> resized_, image_, op_scratch_;
  std::vector<float> blur_scratch_;
  std::vector<int> gather_x_, gather_y_;  // image_ pixel → resized_ pixel (−1: fill)
  // Per-channel uint8 -> output value tables for float outputs, rebuilt when
  // mean/std change: ((float)v / 255 - mean) / std in float32, and its half.
  bool tables_valid_ = false;
  std::array<float, 3> table_mean_{};
  std::array<float, 3> table_std_{};
  std::array<std::array<float, 256>, 3> f32_table_{};
  std::array<std::array<uint16_t, 256>, 3> f16_table_{};
};

}  // namespace conveyor
