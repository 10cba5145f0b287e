#include "core/gpu/convert_spec.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace conveyor::gpu {

uint64_t DeviceDTypeBytes(DeviceDType dtype) {
  switch (dtype) {
    case DeviceDType::kUint8: return 1;
    case DeviceDType::kFloat32: return 4;
    case DeviceDType::kFloat16:
    case DeviceDType::kBFloat16: return 2;
  }
  return 1;
}

const char* DeviceDTypeName(DeviceDType dtype) {
  switch (dtype) {
    case DeviceDType::kUint8: return "uint8";
    case DeviceDType::kFloat32: return "float32";
    case DeviceDType::kFloat16: return "float16";
    case DeviceDType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

absl::Status ValidateConvertSpec(const ConvertSpec& spec) {
  if (spec.channels < 1 || spec.channels > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("convert: channels must be 1..3, not ", spec.channels));
  }
  if (spec.elements > std::numeric_limits<uint64_t>::max() / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("convert: elements ", spec.elements, " too large"));
  }
  if (spec.channels_last) {
    if (spec.elements % spec.channels != 0) {
      return absl::InvalidArgumentError(absl::StrCat("convert: elements ", spec.elements,
                                                     " is not a multiple of channels ",
                                                     spec.channels, " (NHWC)"));
    }
  } else {
    if (spec.plane == 0) return absl::InvalidArgumentError("convert: plane must be >= 1 (NCHW)");
    if (spec.plane > std::numeric_limits<uint64_t>::max() / spec.channels ||
        spec.elements % (spec.plane * spec.channels) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("convert: elements ", spec.elements,
                                                     " is not a multiple of plane ", spec.plane,
                                                     " x channels ", spec.channels, " (NCHW)"));
    }
  }
  for (uint32_t c = 0; c < spec.channels; ++c) {
    if (!std::isfinite(spec.mean[c])) {
      return absl::InvalidArgumentError(absl::StrCat("convert: mean[", c, "] is not finite"));
    }
    if (!std::isfinite(spec.std[c]) || spec.std[c] == 0.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("convert: std[", c, "] must be finite and non-zero"));
    }
  }
  return absl::OkStatus();
}

ConvertParams ParamsOf(const ConvertSpec& spec) {
  ConvertParams p;
  p.elements = spec.elements;
  p.channels = spec.channels;
  p.plane = spec.plane == 0 ? 1 : spec.plane;
  p.channels_last = spec.channels_last;
  for (int c = 0; c < 3; ++c) {
    p.mean[c] = spec.mean[c];
    p.std[c] = spec.std[c];
  }
  return p;
}

void ConvertOnHost(void* dst, const uint8_t* src, DeviceDType dtype, const ConvertParams& params) {
  const uint64_t n = params.elements;
  switch (dtype) {
    case DeviceDType::kUint8: {
      uint8_t* out = static_cast<uint8_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) out[i] = src[i];
      break;
    }
    case DeviceDType::kFloat32: {
      float* out = static_cast<float*>(dst);
      for (uint64_t i = 0; i < n; ++i) out[i] = NormalizeU8(src[i], ChannelOf(i, params), params);
      break;
    }
    case DeviceDType::kFloat16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) {
        out[i] = HalfBits(NormalizeU8(src[i], ChannelOf(i, params), params));
      }
      break;
    }
    case DeviceDType::kBFloat16: {
      uint16_t* out = static_cast<uint16_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) {
        out[i] = BFloat16Bits(NormalizeU8(src[i], ChannelOf(i, params), params));
      }
      break;
    }
  }
}

}  // namespace conveyor::gpu
