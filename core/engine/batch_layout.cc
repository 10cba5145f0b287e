#include "core/engine/batch_layout.h"

namespace conveyor {

static size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

BatchLayout BatchLayout::For(const TransformSpec& spec, uint32_t batch_size,
                             std::span<const SampleFieldSpec> fields) {
  BatchLayout l;
  l.batch_size = batch_size;
  l.sample_bytes = SampleBytes(spec);
  l.images_offset = 0;
  l.labels_offset = AlignUp(l.sample_bytes * batch_size, 64);
  l.indices_offset = l.labels_offset + sizeof(int64_t) * batch_size;
  size_t end = l.indices_offset + sizeof(int64_t) * batch_size;
  for (const SampleFieldSpec& f : fields) {
    FieldArea a;
    // A mask's value is its decoded pixels, one byte each at the output size.
    a.stride = f.type == FieldType::kMask
                   ? static_cast<uint32_t>(spec.output_height) * spec.output_width
                   : f.max_bytes;
    a.offsets_offset = AlignUp(end, 8);
    a.present_offset = a.offsets_offset + sizeof(uint32_t) * (size_t{batch_size} + 1);
    a.data_offset = AlignUp(a.present_offset + batch_size, 8);
    end = a.data_offset + size_t{batch_size} * a.stride;
    l.fields.push_back(a);
  }
  l.slot_bytes = end;
  return l;
}

}  // namespace conveyor
