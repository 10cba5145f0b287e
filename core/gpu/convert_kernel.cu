// The uint8 → float32 / float16 / bfloat16 conversion kernel: one thread per
// element in a grid-stride loop, the math of core/gpu/convert.h.
#include <cuda_runtime.h>

#include "core/gpu/convert.h"
#include "core/gpu/convert_kernel.h"

namespace conveyor::gpu {
namespace {

template <DeviceDType kOut>
__global__ void ConvertKernel(void* dst, const uint8_t* src, ConvertParams p) {
  const uint64_t stride = ElementStride(gridDim.x, blockDim.x);
  for (uint64_t i = FirstElement(blockIdx.x, threadIdx.x, blockDim.x); i < p.elements;
       i += stride) {
    const uint8_t v = src[i];
    if constexpr (kOut == DeviceDType::kUint8) {
      static_cast<uint8_t*>(dst)[i] = v;
    } else {
      const float f = NormalizeU8(v, ChannelOf(i, p), p);
      if constexpr (kOut == DeviceDType::kFloat32) {
        static_cast<float*>(dst)[i] = f;
      } else if constexpr (kOut == DeviceDType::kFloat16) {
        static_cast<uint16_t*>(dst)[i] = HalfBits(f);
      } else {
        static_cast<uint16_t*>(dst)[i] = BFloat16Bits(f);
      }
    }
  }
}

}  // namespace

int LaunchConvertKernel(void* stream, uint64_t dst, uint64_t src, DeviceDType dtype,
                        const ConvertParams& params) {
  const LaunchGeometry g = ConvertGeometry(params.elements);
  if (g.blocks == 0) return cudaSuccess;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  void* out = reinterpret_cast<void*>(dst);
  const uint8_t* in = reinterpret_cast<const uint8_t*>(src);
  switch (dtype) {
    case DeviceDType::kUint8:
      ConvertKernel<DeviceDType::kUint8><<<g.blocks, g.threads, 0, s>>>(out, in, params);
      break;
    case DeviceDType::kFloat32:
      ConvertKernel<DeviceDType::kFloat32><<<g.blocks, g.threads, 0, s>>>(out, in, params);
      break;
    case DeviceDType::kFloat16:
      ConvertKernel<DeviceDType::kFloat16><<<g.blocks, g.threads, 0, s>>>(out, in, params);
      break;
    case DeviceDType::kBFloat16:
      ConvertKernel<DeviceDType::kBFloat16><<<g.blocks, g.threads, 0, s>>>(out, in, params);
      break;
  }
  return cudaGetLastError();
}

}  // namespace conveyor::gpu
