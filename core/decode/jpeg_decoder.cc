#include "core/decode/jpeg_decoder.h"

#include <time.h>

#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <cstring>
#include <limits>
#include <string>
#include <utility>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: its message list depends on jconfig.h
// clang-format on

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/base/thread_cpu_clock.h"
#include "core/decode/image_format.h"
#include "core/decode/relaid_entropy_decoder.h"

namespace conveyor {

namespace {

// Progressive files may carry any number of scans; each one re-reads the whole
// coefficient buffer. Like TurboJPEG's TJFLAG_LIMITSCANS, refuse absurd counts
// so a crafted file cannot keep a worker busy for minutes.
constexpr int kMaxScans = 500;

// Rows decoded per libjpeg call batch (libjpeg emits at most 4 per call; we
// loop until the batch is full).
constexpr int kBatchRows = 16;

// Extra columns decoded on each side of the requested region when it does not
// touch the image edge. libjpeg's fancy (triangle) chroma upsampling treats the
// edge of a cropped scanline like an image edge and replicates the chroma
// sample there, so the first and last decoded columns can differ from a full
// decode; with one spare column on each side the requested ones are exact.
constexpr int kColumnMargin = 1;

// Warnings that mean decoded pixels are wrong; they abort the decode.
// Extraneous bytes before a marker are harmless between header markers (some
// writers pad there) but, once scan data is being decoded, mean the entropy
// decoder lost sync with the data.
bool IsCorruptDataWarning(int code, bool decoding_scans) {
  switch (code) {
    case JWRN_EXTRANEOUS_DATA: return decoding_scans;
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
#if JPEG_LIB_VERSION >= 70 || defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION: return true;
    default: return false;
  }
}

// The CPU budget is read from the clock on every kCpuCheckInterval-th call
// of the progress monitor (one call per row of blocks read, or per call of
// the output pass: microseconds apart even in a costly file), which keeps
// the clock's cost negligible next to decoding.
constexpr unsigned kCpuCheckInterval = 8;

// Allowance for the fixed part of libjpeg's per-image memory in
// EstimateDecodeMemory: tables, entropy decoder state and the memory
// manager's small pools (libjpeg-turbo's first image pool is about 16 KB).
constexpr uint64_t kFixedDecodeBytes = 256 * 1024;

// "looks like PNG", or "unknown format".
std::string LooksLike(const char* format) {
  return std::strcmp(format, "unknown format") == 0 ? format : absl::StrCat("looks like ", format);
}

uint64_t RoundUp(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

inline int MulDiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

}  // namespace

void CmykToRgb(const uint8_t* in, uint8_t* out, int n) {
  for (int i = 0; i < n; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 - ink K, and the stored value is 255 - ink
    const uint8_t c = static_cast<uint8_t>(255 - in[0]);
    const uint8_t m = static_cast<uint8_t>(255 - in[1]);
    const uint8_t y = static_cast<uint8_t>(255 - in[2]);
    // nk - MULDIV255(ink, nk) is in [0, 255]: no clipping needed.
    out[0] = static_cast<uint8_t>(nk - MulDiv255(c, nk));
    out[1] = static_cast<uint8_t>(nk - MulDiv255(m, nk));
    out[2] = static_cast<uint8_t>(nk - MulDiv255(y, nk));
  }
}

// Owns the libjpeg image in progress, from jpeg_read_header until the
// decoder is done with it: its destructor calls jpeg_abort_decompress, which
// frees libjpeg's per-image memory and readies the decompressor for the next
// image, on every path (errors, early returns, rows below a region that are
// never decoded). Moved from ReadHeader (on success) into the decoder's
// state, and from there into DecodeRegion, which lets it go on return.
class ImageInProgress {
 public:
  ImageInProgress() = default;
  explicit ImageInProgress(jpeg_decompress_struct* cinfo) : cinfo_(cinfo) {}
  ImageInProgress(ImageInProgress&& o) noexcept : cinfo_(std::exchange(o.cinfo_, nullptr)) {}
  ImageInProgress& operator=(ImageInProgress&& o) noexcept {
    if (this != &o) {
      Abort();
      cinfo_ = std::exchange(o.cinfo_, nullptr);
    }
    return *this;
  }
  ~ImageInProgress() { Abort(); }
  explicit operator bool() const { return cinfo_ != nullptr; }

 private:
  void Abort() {
    if (cinfo_ != nullptr) jpeg_abort_decompress(cinfo_);
    cinfo_ = nullptr;
  }
  jpeg_decompress_struct* cinfo_ = nullptr;
};

struct JpegDecoder::State {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  // Set before every longjmp: the message, and what kind of failure it is.
  enum class Failure { kCorrupt, kTruncated, kLimit };
  char message[JMSG_LENGTH_MAX];
  Failure failure;
  bool decoding_scans = false;  // past jpeg_read_header
  bool created = false;
  // The image's limits (from ReadHeader): memory for the backstop's
  // message, and the CPU deadline (thread CPU ns; 0: none).
  uint64_t max_memory = 0;
  double max_cpu_seconds = 0;
  int64_t cpu_deadline_ns = 0;
  unsigned progress_calls = 0;
  // A header read by ReadHeader, waiting for DecodeRegion (empty otherwise).
  ImageInProgress image;

  State() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err);
    err.error_exit = &ErrorExit;
    err.emit_message = &EmitMessage;
    err.output_message = &OutputMessage;
    progress.progress_monitor = &ProgressMonitor;
    progress.pass_counter = progress.pass_limit = 0;
    progress.completed_passes = progress.total_passes = 0;
    message[0] = '\0';
    failure = Failure::kCorrupt;
    cinfo.client_data = this;
    Create();
  }

  ~State() {
    image = ImageInProgress();  // aborted before the decompressor goes
    if (created) jpeg_destroy_decompress(&cinfo);
  }

  // A new libjpeg decompressor in `cinfo` (the old one, if any, destroyed),
  // so that nothing of an earlier image survives: libjpeg keeps quantization
  // and Huffman tables across images in a reused decompressor, which would
  // let a file without DQT decode with an earlier image's tables, and one
  // without DHT with an earlier image's Huffman tables instead of the
  // standard ones a fresh decompressor installs. A few small allocations,
  // negligible next to decoding (bench/decode_bench).
  // REQUIRES: no image in progress.
  void Recreate() {
    if (created) jpeg_destroy_decompress(&cinfo);
    created = false;
    Create();
  }

 private:
  void Create() {
    // jpeg_create_decompress keeps err and client_data and zeroes the rest.
    // It can only fail for lack of memory, which error_exit reports.
    if (setjmp(jump) == 0) {
      jpeg_create_decompress(&cinfo);
      cinfo.progress = &progress;
      created = true;
    }
  }

 public:
  static State* From(j_common_ptr c) { return static_cast<State*>(c->client_data); }

  [[noreturn]] static void ErrorExit(j_common_ptr c) {
    State* s = From(c);
    if (c->err->msg_code == JERR_NO_BACKING_STORE && s->max_memory != 0) {
      // The memory manager's cap (max_memory_to_use) refused the image's
      // large arrays: the estimate in ReadHeader should have caught it.
      std::snprintf(s->message, sizeof(s->message),
                    "decoding needs more than max_decode_memory (%.1f MiB)", Mib(s->max_memory));
      s->failure = Failure::kLimit;
    } else {
      (*c->err->format_message)(c, s->message);
      s->failure = Failure::kCorrupt;
    }
    std::longjmp(s->jump, 1);
  }

  static void EmitMessage(j_common_ptr c, int level) {
    if (level >= 0) return;  // trace messages
    State* s = From(c);
    if (!IsCorruptDataWarning(c->err->msg_code, s->decoding_scans)) return;
    s->failure = c->err->msg_code == JWRN_JPEG_EOF ? Failure::kTruncated : Failure::kCorrupt;
    (*c->err->format_message)(c, s->message);
    std::longjmp(s->jump, 1);
  }

  static void OutputMessage(j_common_ptr) {}  // never print

  static void ProgressMonitor(j_common_ptr c) {
    if (!c->is_decompressor) return;
    auto* d = reinterpret_cast<j_decompress_ptr>(c);
    State* s = From(c);
    if (d->input_scan_number > kMaxScans) {
      std::snprintf(s->message, sizeof(s->message), "more than %d progressive scans", kMaxScans);
      s->failure = Failure::kCorrupt;
      std::longjmp(s->jump, 1);
    }
    if (s->cpu_deadline_ns != 0 && ++s->progress_calls % kCpuCheckInterval == 0 &&
        ThreadCpuNs() > s->cpu_deadline_ns) {
      std::snprintf(s->message, sizeof(s->message),
                    "decoding took more than max_decode_seconds (%g s of CPU; stopped in scan %d)",
                    s->max_cpu_seconds, d->input_scan_number);
      s->failure = Failure::kLimit;
      std::longjmp(s->jump, 1);
    }
  }
};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {}

JpegDecoder::~JpegDecoder() = default;

absl::Status JpegDecoder::LibjpegError(const char* what) const {
  if (state_->failure == State::Failure::kTruncated) {
    return absl::DataLossError("truncated JPEG data (premature end of file)");
  }
  if (state_->failure == State::Failure::kLimit) {
    return absl::ResourceExhaustedError(state_->message);
  }
  // libjpeg's corrupt-data warnings already start with "Corrupt JPEG data: ".
  absl::string_view message = state_->message;
  absl::ConsumePrefix(&message, "Corrupt JPEG data: ");
  return absl::DataLossError(absl::StrCat(what, ": ", message));
}

absl::StatusOr<JpegHeader> JpegDecoder::ReadHeader(std::span<const uint8_t> bytes,
                                                   const DecodeLimits& limits) {
  const uint64_t max_pixels = limits.max_pixels;
  state_->image = ImageInProgress();  // drops a header read but never decoded
  state_->Recreate();                 // every image starts from a clean decompressor
  if (!state_->created) return absl::InternalError("libjpeg decompressor could not be created");
  state_->max_memory = limits.max_memory;
  state_->max_cpu_seconds = limits.max_cpu_seconds;
  state_->progress_calls = 0;
  state_->cpu_deadline_ns = limits.max_cpu_seconds > 0
                                ? ThreadCpuNs() + static_cast<int64_t>(limits.max_cpu_seconds * 1e9)
                                : 0;
  // The backstop: libjpeg's memory manager refuses large arrays beyond this
  // (it has no backing store, so an array that does not fit is an error).
  state_->cinfo.mem->max_memory_to_use =
      limits.max_memory == 0 ? 0
                             : static_cast<long>(std::min<uint64_t>(
                                   limits.max_memory, std::numeric_limits<long>::max()));
  if (bytes.empty()) return absl::InvalidArgumentError("empty input (0 bytes)");
  if (bytes.size() < 2 || bytes[0] != 0xFF || bytes[1] != 0xD8) {
    // Named by its magic bytes; file content is never echoed (it may be
    // anything, terminal escapes included).
    if (bytes.size() == 1) return absl::InvalidArgumentError("not a JPEG (1 byte, unknown format)");
    return absl::InvalidArgumentError(
        absl::StrCat("not a JPEG (", LooksLike(ImageFormatName(bytes)), ")"));
  }
  bytes_ = bytes;
  JpegHeader header;
  ImageInProgress image(&state_->cinfo);  // aborted on every return but the last
  if (!ReadHeaderLibjpeg(&header)) return LibjpegError("corrupt JPEG header");
  const uint64_t pixels =
      static_cast<uint64_t>(header.width) * static_cast<uint64_t>(header.height);
  if (pixels > max_pixels) {
    return absl::InvalidArgumentError(absl::StrFormat("image %dx%d exceeds max_pixels %d",
                                                      header.width, header.height, max_pixels));
  }
  if (limits.max_memory != 0) {
    const uint64_t need = EstimateDecodeMemory();
    if (need > limits.max_memory) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "image %dx%d (%s, %d component%s) needs about %.1f MiB to decode, more than "
          "max_decode_memory (%.1f MiB)",
          header.width, header.height,
          header.progressive ? "progressive" : (MultiScan() ? "multi-scan" : "baseline"),
          header.components, header.components == 1 ? "" : "s", Mib(need), Mib(limits.max_memory)));
    }
  }
  // The scan data starts where libjpeg stopped reading; an intact file has an
  // end-of-image marker after it (0xFF 0xD9 cannot occur inside entropy-coded
  // data, where 0xFF is always followed by 0x00 or a restart marker).
  const size_t scan_start = bytes.size() - state_->cinfo.src->bytes_in_buffer;
  bool has_eoi = false;
  for (size_t i = bytes.size(); i >= scan_start + 2; --i) {
    if (bytes[i - 2] == 0xFF && bytes[i - 1] == 0xD9) {
      has_eoi = true;
      break;
    }
  }
  if (!has_eoi) {
    return absl::DataLossError("truncated JPEG data (no end-of-image marker after the scan data)");
  }
  state_->image = std::move(image);  // kept for DecodeRegion
  return header;
}

bool JpegDecoder::MultiScan() const {
  const jpeg_decompress_struct& c = state_->cinfo;
  return c.progressive_mode || c.comps_in_scan < c.num_components;
}

uint64_t JpegDecoder::EstimateDecodeMemory() const {
  const jpeg_decompress_struct& c = state_->cinfo;
  const uint64_t block_bytes = sizeof(JBLOCK);  // 64 coefficients of 2 bytes
  const bool multi_scan = MultiScan();
  const uint64_t max_v = static_cast<uint64_t>(c.max_v_samp_factor);
  // Output rows are as wide as whole iMCUs.
  const uint64_t padded_width =
      RoundUp(c.image_width, static_cast<uint64_t>(c.max_h_samp_factor) * DCTSIZE);
  uint64_t bytes = kFixedDecodeBytes;
  for (int ci = 0; ci < c.num_components; ++ci) {
    const jpeg_component_info& comp = c.comp_info[ci];
    const uint64_t h = static_cast<uint64_t>(comp.h_samp_factor);
    const uint64_t v = static_cast<uint64_t>(comp.v_samp_factor);
    const uint64_t blocks_wide = RoundUp(comp.width_in_blocks, h);
    // Coefficients: all of the component's blocks when the file has several
    // scans (jdcoefct.c's whole-image array), else one iMCU row of them.
    const uint64_t block_rows = multi_scan ? RoundUp(comp.height_in_blocks, v) : v;
    bytes += blocks_wide * block_rows * block_bytes;
    // Sample rows of the main controller: v × 8 rows, and context rows
    // around them for fancy upsampling (10 row groups of v rows in all).
    bytes += blocks_wide * DCTSIZE * v * 10;
    // The upsampler's full-width rows of this component.
    bytes += padded_width * max_v * DCTSIZE;
  }
  // This decoder's batch of rows (4 bytes a pixel for CMYK).
  bytes += padded_width * 4 * kBatchRows + kRowSlack;
  return bytes;
}

bool JpegDecoder::ReadHeaderLibjpeg(JpegHeader* header) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  state_->decoding_scans = false;
  if (setjmp(state_->jump) != 0) return false;
  jpeg_mem_src(cinfo, bytes_.data(), static_cast<unsigned long>(bytes_.size()));
  jpeg_read_header(cinfo, TRUE);
  header->width = static_cast<int>(cinfo->image_width);
  header->height = static_cast<int>(cinfo->image_height);
  header->components = cinfo->num_components;
  header->progressive = cinfo->progressive_mode != 0;
  header->arithmetic = cinfo->arith_code != 0;
  header->restart_interval = static_cast<int>(cinfo->restart_interval);
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE: header->color = JpegColor::kGray; break;
    case JCS_YCbCr: header->color = JpegColor::kYCbCr; break;
    case JCS_RGB: header->color = JpegColor::kRgb; break;
    case JCS_CMYK: header->color = JpegColor::kCmyk; break;
    case JCS_YCCK: header->color = JpegColor::kYcck; break;
    default: header->color = JpegColor::kOther; break;
  }
  return true;
}

absl::Status JpegDecoder::DecodeRegion(const PixelRegion& region, int scale_denom, RowSink sink,
                                       const McuIntervals* intervals) {
  if (!state_->image) return absl::FailedPreconditionError("DecodeRegion without ReadHeader");
  // Aborted whenever this returns: rows below the region are never decoded,
  // and an error leaves libjpeg's per-image memory to free.
  const ImageInProgress image = std::move(state_->image);
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
    return absl::InvalidArgumentError(absl::StrCat("bad scale denominator ", scale_denom));
  }
  const int sw = ScaledSize(static_cast<int>(state_->cinfo.image_width), scale_denom);
  const int sh = ScaledSize(static_cast<int>(state_->cinfo.image_height), scale_denom);
  if (region.x0 < 0 || region.y0 < 0 || region.x1 > sw || region.y1 > sh ||
      region.x0 >= region.x1 || region.y0 >= region.y1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region [%d,%d)x[%d,%d) outside the %dx%d image", region.x0, region.x1,
                        region.y0, region.y1, sw, sh));
  }
  relaid_installed_ = false;
  if (intervals != nullptr && relaid_decoder_ == nullptr) {
    relaid_decoder_ = std::make_unique<RelaidEntropyDecoder>();
  }
  if (!DecodeRegionLibjpeg(region, scale_denom, sink, intervals)) {
    return LibjpegError("corrupt JPEG data");
  }
  return absl::OkStatus();
}

uint64_t JpegDecoder::mcus_decoded_from_intervals() const {
  return relaid_installed_ ? relaid_decoder_->mcus_decoded() : 0;
}

bool JpegDecoder::DecodeRegionLibjpeg(const PixelRegion& region, int scale_denom, RowSink sink,
                                      const McuIntervals* intervals) {
  jpeg_decompress_struct* cinfo = &state_->cinfo;
  if (setjmp(state_->jump) != 0) return false;
  const bool cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  cinfo->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo->scale_num = 1;
  cinfo->scale_denom = static_cast<unsigned int>(scale_denom);
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  state_->decoding_scans = true;
  jpeg_start_decompress(cinfo);

  const int full_width = static_cast<int>(cinfo->output_width);
  JDIMENSION xoffset = 0;
  if (region.x0 > 0 || region.x1 < full_width) {
    const int want_x0 = region.x0 > kColumnMargin ? region.x0 - kColumnMargin : 0;
    const int want_x1 =
        region.x1 + kColumnMargin < full_width ? region.x1 + kColumnMargin : full_width;
    xoffset = static_cast<JDIMENSION>(want_x0);
    JDIMENSION width = static_cast<JDIMENSION>(want_x1 - want_x0);
    jpeg_crop_scanline(cinfo, &xoffset, &width);  // widens to iMCU boundaries
  }
  if (intervals != nullptr) {
    // After the crop: the decoder reads which MCU columns libjpeg transforms.
    relaid_installed_ = relaid_decoder_->Install(cinfo, bytes_, *intervals);
  }
  const int bpp = cmyk ? 4 : 3;
  const size_t stride = static_cast<size_t>(cinfo->output_width) * bpp;
  const size_t need = stride * kBatchRows + kRowSlack;
  if (batch_capacity_ < need) {
    batch_.reset(new uint8_t[need]);
    batch_capacity_ = need;
    std::memset(batch_.get(), 0, need);
  }
  const size_t x_in_batch = static_cast<size_t>(region.x0 - static_cast<int>(xoffset)) * bpp;
  const size_t x_in_batch_rgb = static_cast<size_t>(region.x0 - static_cast<int>(xoffset)) * 3;

  if (region.y0 > 0) {
    jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(region.y0));
  }
  JSAMPROW rows[kBatchRows];
  int y = region.y0;
  while (y < region.y1) {
    const int want = region.y1 - y < kBatchRows ? region.y1 - y : kBatchRows;
    for (int i = 0; i < want; ++i) rows[i] = batch_.get() + static_cast<size_t>(i) * stride;
    int got = 0;
    while (got < want) {
      const JDIMENSION n =
          jpeg_read_scanlines(cinfo, rows + got, static_cast<JDIMENSION>(want - got));
      if (n == 0) {
        // Cannot happen with a memory source (it never suspends); be safe.
        std::snprintf(state_->message, sizeof(state_->message), "decoder stalled");
        state_->failure = State::Failure::kCorrupt;
        return false;
      }
      got += static_cast<int>(n);
    }
    if (cmyk) {
      // Convert the whole decoded width in place; the region then sits at
      // x_in_batch_rgb in each row (rows keep their 4-byte-per-pixel stride).
      for (int i = 0; i < want; ++i) {
        CmykToRgb(rows[i], rows[i], static_cast<int>(cinfo->output_width));
      }
      sink(batch_.get() + x_in_batch_rgb, stride, want);
    } else {
      sink(batch_.get() + x_in_batch, stride, want);
    }
    y += want;
  }
  return true;
}

absl::Status JpegDecoder::DecodeImage(int scale_denom, RgbImage* out) {
  if (!state_->image) return absl::FailedPreconditionError("DecodeImage without ReadHeader");
  PixelRegion region;
  region.x1 = ScaledSize(static_cast<int>(state_->cinfo.image_width), scale_denom);
  region.y1 = ScaledSize(static_cast<int>(state_->cinfo.image_height), scale_denom);
  out->width = region.x1;
  out->height = region.y1;
  // Grows as rows arrive, so a file that lies about its size fails before
  // the whole declared image is allocated.
  out->pixels.clear();
  const size_t row_bytes = static_cast<size_t>(region.x1) * 3;
  return DecodeRegion(region, scale_denom, [&](const uint8_t* rows, size_t stride, int count) {
    for (int i = 0; i < count; ++i) {
      const uint8_t* row = rows + static_cast<size_t>(i) * stride;
      out->pixels.insert(out->pixels.end(), row, row + row_bytes);
    }
  });
}

}  // namespace conveyor
