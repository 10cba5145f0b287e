// RgbView: a view of an 8-bit RGB image whose rows are packed (stride
// 3 × width), the whole-image buffer the per-image ops (core/decode/color_ops.h,
// core/decode/affine_ops.h) work on in place. It owns nothing.
//
// Thread-safety: a plain view; whoever owns the pixels says who may touch them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace conveyor {

struct RgbView {
  uint8_t* data = nullptr;
  int width = 0;
  int height = 0;

  size_t stride() const { return static_cast<size_t>(width) * 3; }
  size_t bytes() const { return stride() * static_cast<size_t>(height); }
  uint8_t* row(int y) const { return data + static_cast<size_t>(y) * stride(); }
};

}  // namespace conveyor
