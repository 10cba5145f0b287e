// ConvertSpec (core/gpu/device_api.h) checked and turned into the kernel's
// ConvertParams (core/gpu/convert.h), the byte sizes of its input and
// output, and the conversion run on the CPU with the kernel's own functions
// (the host model's Convert). Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/gpu/convert.h"
#include "core/gpu/device_api.h"

namespace conveyor::gpu {

// Bytes of one value of `dtype`.
uint64_t DeviceDTypeBytes(DeviceDType dtype);
// "uint8", "float32", "float16", "bfloat16".
const char* DeviceDTypeName(DeviceDType dtype);

// InvalidArgument naming the field: channels outside 1..3, a plane of 0 in
// NCHW, elements not a whole number of planes × channels (NCHW) or pixels
// (NHWC), a zero or non-finite std or non-finite mean, or a byte count that
// overflows.
absl::Status ValidateConvertSpec(const ConvertSpec& spec);

// REQUIRES: ValidateConvertSpec(spec).ok().
ConvertParams ParamsOf(const ConvertSpec& spec);

// Converts params.elements values from `src` into `dst` (dtype's layout) on
// the calling thread, element by element with the kernel's functions.
void ConvertOnHost(void* dst, const uint8_t* src, DeviceDType dtype, const ConvertParams& params);

}  // namespace conveyor::gpu
