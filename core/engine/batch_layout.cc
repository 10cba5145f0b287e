#include "core/engine/batch_layout.h"

namespace conveyor {

static size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

BatchLayout BatchLayout::For(const TransformSpec& spec, uint32_t batch_size) {
  BatchLayout l;
  l.batch_size = batch_size;
  l.sample_bytes = SampleBytes(spec);
  l.images_offset = 0;
  l.labels_offset = AlignUp(l.sample_bytes * batch_size, 64);
  l.indices_offset = l.labels_offset + sizeof(int64_t) * batch_size;
  l.slot_bytes = l.indices_offset + sizeof(int64_t) * batch_size;
  return l;
}

}  // namespace conveyor
