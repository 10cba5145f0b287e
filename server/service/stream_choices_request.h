// The stream choices of an OpenStream request (its height, width, dtype and
// fields; core/engine/stream_choices.h), read from the proto. The pipeline
// judges them (PipelineForStream); this only refuses what no pipeline could
// take: a dtype the proto does not define.
//
// Thread-safety: a pure function.
#pragma once

#include "absl/status/statusor.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/engine/stream_choices.h"

namespace conveyor::server {

absl::StatusOr<StreamChoices> StreamChoicesOf(const v1::OpenStream& req);

}  // namespace conveyor::server
