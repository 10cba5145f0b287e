// BatchLayout: where a batch's parts lie inside one slot.
//
//   [images: batch_size × sample_bytes][pad to 64][labels: int64 × batch_size]
//   [indices: int64 × batch_size]
//   then per sample field (core/data/sample_fields.h), 8-aligned:
//   [offsets: uint32 × (batch_size + 1)][present: uint8 × batch_size]
//   [data: batch_size × max_bytes]
//
// A field's area is written in two steps. While a batch fills, the sample at
// position p writes its value at data + p × max_bytes, its length at
// offsets[p + 1] and present[p] (positions are written concurrently, each by
// its own task); once the batch is complete, PackFieldAreas
// (core/engine/collate.h) moves the surviving samples' values together,
// Arrow-style: value i is data[offsets[i], offsets[i + 1]).
//
// Images are contiguous, so a batch of n ≤ batch_size samples is the first
// n × sample_bytes bytes: an array of shape (n, C, H, W) or (n, H, W, C).
// A plain value; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/data/sample_fields.h"

#include "core/decode/transform_spec.h"

namespace conveyor {

struct BatchLayout {
  uint32_t batch_size = 0;
  size_t sample_bytes = 0;
  size_t images_offset = 0;
  size_t labels_offset = 0;   // int64 per sample
  size_t indices_offset = 0;  // int64 (dataset index) per sample
  struct FieldArea {
    size_t offsets_offset = 0;  // uint32 × (batch_size + 1)
    size_t present_offset = 0;  // uint8 × batch_size
    size_t data_offset = 0;     // batch_size × stride bytes
    uint32_t stride = 0;        // the field's max_bytes; a mask's height × width
  };
  std::vector<FieldArea> fields;  // one per pipeline field, in order
  size_t slot_bytes = 0;          // bytes one slot needs (before page rounding)

  static BatchLayout For(const TransformSpec& spec, uint32_t batch_size,
                         std::span<const SampleFieldSpec> fields = {});
};

}  // namespace conveyor
