// BatchLayout: where a batch's parts lie inside one slot.
//
//   [images: batch_size × sample_bytes][pad to 64][labels: int64 × batch_size]
//   [indices: int64 × batch_size]
//
// Images are contiguous, so a batch of n ≤ batch_size samples is the first
// n × sample_bytes bytes: an array of shape (n, C, H, W) or (n, H, W, C).
// A plain value; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/decode/transform_spec.h"

namespace conveyor {

struct BatchLayout {
  uint32_t batch_size = 0;
  size_t sample_bytes = 0;
  size_t images_offset = 0;
  size_t labels_offset = 0;   // int64 per sample
  size_t indices_offset = 0;  // int64 (dataset index) per sample
  size_t slot_bytes = 0;      // bytes one slot needs (before page rounding)

  static BatchLayout For(const TransformSpec& spec, uint32_t batch_size);
};

}  // namespace conveyor
