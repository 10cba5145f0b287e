// The uint8 → float32 / float16 / bfloat16 conversion of a batch on the GPU,
// as plain functions the kernel (core/gpu/convert_kernel.cu), the host model
// (core/gpu/host_device_api.cc) and the unit tests share: one formula, one
// rounding, one index and launch-geometry calculation, so that what the
// tests check on the CPU is what the device runs.
//
// The value formula is the daemon's host formula (core/decode/
// sample_transformer.cc): (v / 255.0f - mean[c]) / std[c] in float32, three
// IEEE roundings (nvcc compiles it with --fmad=false, and no operation here
// is a multiply-add in any case). float16 rounds as the daemon's FloatToHalf
// (nearest even, overflow to infinity, NaN kept a quiet NaN); bfloat16 rounds
// to nearest even, NaN kept a quiet NaN.
//
// Compiles with g++ (CONVEYOR_HD is empty) and with nvcc (__host__
// __device__). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define CONVEYOR_HD __host__ __device__
#else
#define CONVEYOR_HD
#endif

namespace conveyor::gpu {

// The parameters of one conversion, a plain struct the kernel takes by value.
struct ConvertParams {
  uint64_t elements = 0;  // uint8 values in, as many values out
  uint32_t channels = 3;  // 1..3
  uint64_t plane = 1;     // height × width (NCHW); >= 1
  bool channels_last = false;
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
};

CONVEYOR_HD inline uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// The channel of element `i`: NHWC the fastest-varying index, NCHW the plane's.
CONVEYOR_HD inline uint32_t ChannelOf(uint64_t i, const ConvertParams& p) {
  return static_cast<uint32_t>(p.channels_last ? i % p.channels : (i / p.plane) % p.channels);
}

// ToTensor + Normalize of one value, in float32.
CONVEYOR_HD inline float NormalizeU8(uint8_t v, uint32_t c, const ConvertParams& p) {
  const float scaled = static_cast<float>(v) / 255.0f;
  return (scaled - p.mean[c]) / p.std[c];
}

// binary32 → binary16 bits, round to nearest, ties to even; overflow to
// infinity, NaN → 0x7E00 with the sign (bit-exact with the daemon's
// FloatToHalf).
CONVEYOR_HD inline uint16_t HalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exponent = (x >> 23) & 0xFFu;
  const uint32_t mantissa = x & 0x7FFFFFu;
  if (exponent == 0xFFu) return static_cast<uint16_t>(sign | (mantissa != 0 ? 0x7E00u : 0x7C00u));
  const int e = static_cast<int>(exponent) - 127 + 15;  // the half's biased exponent
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  if (e >= 1) {
    uint32_t h = (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1FFFu;
    // A carry out of the mantissa bumps the exponent (up to infinity): right.
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0)) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half (or zero): the value in units of 2^-24, rounded.
  if (e < -10) return static_cast<uint16_t>(sign);  // below 2^-25: zero
  const uint32_t full = mantissa | 0x800000u;       // the value is full × 2^(exponent - 150)
  const int shift = 14 - e;                         // 14..24
  uint32_t q = full >> shift;
  const uint32_t rest = full & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u) != 0)) ++q;
  return static_cast<uint16_t>(sign | q);
}

// binary32 → bfloat16 bits, round to nearest, ties to even; NaN stays a
// quiet NaN (sign and top mantissa bits kept).
CONVEYOR_HD inline uint16_t BFloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

// Launch geometry: a grid-stride loop over `elements`, kConvertThreads per
// block and at most `max_blocks` blocks (0 blocks for 0 elements: no launch).
inline constexpr uint32_t kConvertThreads = 256;
inline constexpr uint32_t kConvertMaxBlocks = 4096;

struct LaunchGeometry {
  uint32_t blocks = 0;
  uint32_t threads = kConvertThreads;
};

inline LaunchGeometry ConvertGeometry(uint64_t elements, uint32_t max_blocks = kConvertMaxBlocks) {
  LaunchGeometry g;
  const uint64_t needed = (elements + g.threads - 1) / g.threads;
  g.blocks = static_cast<uint32_t>(needed < max_blocks ? needed : max_blocks);
  return g;
}

// The first element thread `thread` of block `block` converts, and the step
// to its next one.
CONVEYOR_HD inline uint64_t FirstElement(uint32_t block, uint32_t thread, uint32_t threads) {
  return static_cast<uint64_t>(block) * threads + thread;
}
CONVEYOR_HD inline uint64_t ElementStride(uint32_t blocks, uint32_t threads) {
  return static_cast<uint64_t>(blocks) * threads;
}

}  // namespace conveyor::gpu
