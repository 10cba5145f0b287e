#include "server/service/batch_message.h"

#include <cstring>

#include "core/engine/batch_layout.h"
#include "core/engine/pipeline_fingerprint.h"
#include "core/engine/slot_arena.h"

namespace conveyor::server {

v1::DType ToProto(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return v1::UINT8;
    case DType::kFloat32: return v1::FLOAT32;
    case DType::kFloat16: return v1::FLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

v1::Layout ToProto(Layout layout) { return layout == Layout::kNCHW ? v1::NCHW : v1::NHWC; }

void AddSampleShape(const TransformSpec& t, google::protobuf::RepeatedField<int64_t>* shape) {
  for (int64_t d : SampleShape(t)) shape->Add(d);
}

v1::FieldType ToProto(FieldType type) {
  switch (type) {
    case FieldType::kText: return v1::FIELD_TEXT;
    case FieldType::kBytes: return v1::FIELD_BYTES;
    case FieldType::kJson: return v1::FIELD_JSON;
    case FieldType::kKey: return v1::FIELD_KEY;
    case FieldType::kNpy: return v1::FIELD_NPY;
    case FieldType::kMask: return v1::FIELD_MASK;
    case FieldType::kAugment: return v1::FIELD_JSON;  // a JSON object, to every client
  }
  return v1::FIELD_TYPE_UNSPECIFIED;
}

v1::PipelineInfo PipelineInfoOf(const PipelineConfig& p) {
  v1::PipelineInfo info;
  info.set_name(p.name);
  info.set_dataset_size(p.dataset->size());
  info.set_num_classes(static_cast<uint32_t>(p.dataset->num_classes()));
  AddSampleShape(p.transform, info.mutable_sample_shape());
  info.set_dtype(ToProto(p.transform.dtype));
  info.set_layout(ToProto(p.transform.layout));
  info.set_max_batch_size(p.max_batch_size);
  info.set_augment(ToString(p.transform.mode));
  info.set_error_policy(ToString(p.error_policy));
  info.set_kind(ToString(p.transform.kind));
  for (auto& [part, value] : PipelineFingerprint(p)) (*info.mutable_fingerprint())[part] = value;
  for (const SampleFieldSpec& f : p.fields) {
    v1::FieldInfo* fi = info.add_fields();
    fi->set_name(f.name);
    fi->set_type(ToProto(f.type));
    fi->set_member(f.member);
    fi->set_required(f.required);
    fi->set_max_bytes(f.max_bytes);
    fi->set_dtype(f.npy_dtype);
    if (f.geometry != FieldGeometry::kNone) fi->set_geometry(ToString(f.geometry));
    fi->set_normalized(f.normalized);
  }
  return info;
}

void FillBatchHeader(const BatchInfo& b, const Stream& stream, v1::Batch* o) {
  const BatchLayout& layout = stream.layout();
  const TransformSpec& t = stream.pipeline().transform;
  const uint8_t* base = stream.arena().slot(b.slot);
  const uint32_t n = b.num_samples;
  o->set_sequence(b.sequence);
  o->set_epoch(b.epoch);
  o->set_batch_in_epoch(b.batch_in_epoch);
  o->set_position(b.position);
  o->set_offset(b.offset);
  o->set_epoch_samples(b.epoch_samples);
  o->set_end_of_epoch(b.end_of_epoch);
  o->set_num_samples(n);
  o->add_shape(n);
  AddSampleShape(t, o->mutable_shape());
  o->set_layout(ToProto(t.layout));
  o->set_dtype(ToProto(t.dtype));
  o->set_slot(b.slot);
  o->set_images_bytes(static_cast<uint64_t>(n) * layout.sample_bytes);
  // A batch whose every sample failed (error_policy skip) has no labels:
  // an empty field's data() is null, which memcpy must not be given.
  if (n > 0) {
    o->mutable_labels()->Resize(static_cast<int>(n), 0);
    std::memcpy(o->mutable_labels()->mutable_data(), base + layout.labels_offset,
                sizeof(int64_t) * n);
    o->mutable_sample_indices()->Resize(static_cast<int>(n), 0);
    std::memcpy(o->mutable_sample_indices()->mutable_data(), base + layout.indices_offset,
                sizeof(int64_t) * n);
  }
  // The field areas were packed at collate: n values and n + 1 offsets.
  const std::vector<SampleFieldSpec>& fields = stream.pipeline().fields;
  for (size_t i = 0; i < fields.size(); ++i) {
    const BatchLayout::FieldArea& area = layout.fields[i];
    v1::FieldColumn* c = o->add_fields();
    c->set_name(fields[i].name);
    c->set_type(ToProto(fields[i].type));
    const auto* offsets = base + area.offsets_offset;
    uint32_t bytes = 0;
    std::memcpy(&bytes, offsets + sizeof(uint32_t) * n, sizeof(bytes));
    c->set_offsets(offsets, sizeof(uint32_t) * (size_t{n} + 1));
    c->set_data(base + area.data_offset, bytes);
    c->set_present(base + area.present_offset, n);
    if (fields[i].type == FieldType::kMask) {
      c->add_value_shape(t.output_height);
      c->add_value_shape(t.output_width);
    }
  }
  for (const SampleFailure& f : b.failures) {
    v1::SampleFailure* pf = o->add_failures();
    pf->set_sample_index(f.sample_index);
    // Valid UTF-8, as a proto3 string must be: the engine escapes a
    // failure's path and reason once, when it records it (core/engine/stream.h).
    pf->set_path(f.path);
    pf->set_reason(f.reason);
  }
}

}  // namespace conveyor::server
