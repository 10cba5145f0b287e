// DeviceDType: the element type of a batch on the device (core/gpu/
// device_api.h's ConvertSpec, the kernel launcher in core/gpu/
// convert_kernel.h). A header of its own so that the nvcc-compiled kernel
// sees it without abseil. Thread-safety: a plain enum.
#pragma once

namespace conveyor::gpu {

enum class DeviceDType { kUint8, kFloat32, kFloat16, kBFloat16 };

}  // namespace conveyor::gpu
