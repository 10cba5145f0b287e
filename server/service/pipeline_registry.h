// PipelineRegistry: the named pipelines the daemon serves now. A config
// reload (SIGHUP) replaces the whole set at once; a stream looks its
// pipeline up once, when it opens, and keeps that definition (a shared_ptr)
// for its whole life, so a replaced or removed pipeline lives on exactly as
// long as streams opened on it and new streams see only the new set.
//
// Thread-safety: all methods are safe to call concurrently; a Replace is
// atomic for concurrent lookups (each sees the old set or the new one,
// never a mix).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/engine/pipeline_config.h"

namespace conveyor::server {

using PipelineList = std::vector<std::shared_ptr<const PipelineConfig>>;

class PipelineRegistry {
 public:
  // OK when `pipelines` can be served: at least one, none null, each
  // valid (ValidatePipelineConfig), names unique. InvalidArgument naming the
  // problem otherwise.
  static absl::Status Validate(const PipelineList& pipelines);

  // REQUIRES: Validate(pipelines) is OK.
  explicit PipelineRegistry(PipelineList pipelines);

  // The pipeline called `name`, or NOT_FOUND naming it (and saying so when
  // a reload removed it) with the names served.
  absl::StatusOr<std::shared_ptr<const PipelineConfig>> Find(const std::string& name) const;

  // The pipelines served now, in config order.
  PipelineList List() const;

  // Serves `pipelines` from now on. REQUIRES: Validate(pipelines) is OK.
  void Replace(PipelineList pipelines);

 private:
  struct Set {
    PipelineList list;
    std::map<std::string, std::shared_ptr<const PipelineConfig>> by_name;
  };
  static std::shared_ptr<const Set> MakeSet(PipelineList pipelines);

  mutable Mutex mu_;
  std::shared_ptr<const Set> current_ ABSL_GUARDED_BY(mu_);
  // Names a Replace removed and none re-added since (for NOT_FOUND's text).
  std::set<std::string> removed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
