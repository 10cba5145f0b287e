// The one place where the engine's values become conveyor.v1 messages: the
// dtype, layout and sample shape of a pipeline, its PipelineInfo, and the
// header of a Batch (everything but the image bytes, which the stream's
// transport hands over: server/transport/transport.h).
//
// Thread-safety: pure functions.
#pragma once

#include "conveyor/v1/conveyor.pb.h"
#include "core/decode/transform_spec.h"
#include "core/engine/pipeline_config.h"
#include "core/engine/stream.h"

namespace conveyor::server {

v1::DType ToProto(DType dtype);
v1::Layout ToProto(Layout layout);
v1::FieldType ToProto(FieldType type);

// Adds the shape of one sample (C,H,W or H,W,C) to `shape`.
void AddSampleShape(const TransformSpec& transform,
                    google::protobuf::RepeatedField<int64_t>* shape);

v1::PipelineInfo PipelineInfoOf(const PipelineConfig& pipeline);

// Fills `out` with batch `batch` of `stream`: positions, shape, dtype,
// layout, slot, images_bytes, labels, sample indices and failures (labels
// and indices are copied from the slot; failure paths and reasons escaped
// with EscapeText, so always valid UTF-8). Leaves the images (images,
// images_offset) to the transport.
// REQUIRES: the consumer holds batch.slot.
void FillBatchHeader(const BatchInfo& batch, const Stream& stream, v1::Batch* out);

}  // namespace conveyor::server
