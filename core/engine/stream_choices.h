// StreamChoices: what one stream may choose for itself within the bounds
// its pipeline's operator set — another output size (progressive resizing:
// small images in early epochs, full size at the end), another element type,
// or a subset of the pipeline's fields — without a config reload.
//
// A stream with choices runs on a view of its pipeline (PipelineForStream):
// a copy of the config with the chosen size, dtype and fields, sharing the
// dataset, source, order and caches. Everything downstream (the stream plan,
// the slot layout, the decoders, the batch headers, StreamOpened) then
// follows the stream's choice, and two streams of one pipeline with
// different choices never share a slot layout.
//
// Thread-safety: a plain value; PipelineForStream is a pure function.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/pipeline_config.h"

namespace conveyor {

struct StreamChoices {
  // Output size; 0 and 0: the pipeline's. Must be one of the pipeline's
  // allowed_sizes (its own size always is).
  uint32_t output_height = 0;
  uint32_t output_width = 0;
  // Element type; nullopt: the pipeline's. Must be one of its
  // allowed_dtypes (its own always is).
  std::optional<DType> dtype;
  // The fields the stream delivers, by name, in the pipeline's order
  // whatever the order given; nullopt: all of them. Each name once.
  std::optional<std::vector<std::string>> fields;

  bool empty() const {
    return output_height == 0 && output_width == 0 && !dtype.has_value() && !fields.has_value();
  }
};

// `pipeline` itself when `choices` is empty or chooses what the pipeline
// has; else the view described above. With another size, an `eval`
// pipeline's resize_size scales with it (resize_size × new side / old
// side, rounded up, at least the new side), so the centre crop keeps its
// share of the image. InvalidArgument naming the choice and the allowed
// values when a choice is outside the pipeline's bounds, a field name is
// unknown or given twice, or the view's transform is invalid.
absl::StatusOr<std::shared_ptr<const PipelineConfig>> PipelineForStream(
    std::shared_ptr<const PipelineConfig> pipeline, const StreamChoices& choices);

}  // namespace conveyor
