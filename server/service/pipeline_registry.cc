#include "server/service/pipeline_registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/text_escape.h"
#include "server/access/identity.h"

namespace conveyor::server {

absl::Status PipelineRegistry::Validate(const PipelineList& pipelines) {
  if (pipelines.empty()) return absl::InvalidArgumentError("no pipelines");
  std::set<std::string> names;
  for (const auto& p : pipelines) {
    if (p == nullptr) return absl::InvalidArgumentError("null pipeline");
    if (absl::Status st = ValidatePipelineConfig(*p); !st.ok()) return st;
    if (!names.insert(p->name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate pipeline name ", p->name));
    }
  }
  return absl::OkStatus();
}

std::shared_ptr<const PipelineRegistry::Set> PipelineRegistry::MakeSet(PipelineList pipelines) {
  auto set = std::make_shared<Set>();
  set->list = std::move(pipelines);
  for (const auto& p : set->list) set->by_name.emplace(p->name, p);
  return set;
}

PipelineRegistry::PipelineRegistry(PipelineList pipelines)
    : current_(MakeSet(std::move(pipelines))) {}

absl::StatusOr<std::shared_ptr<const PipelineConfig>> PipelineRegistry::Find(
    const std::string& name) const {
  std::shared_ptr<const Set> set;
  bool removed = false;
  {
    MutexLock lock(&mu_);
    set = current_;
    removed = removed_.count(name) > 0;
  }
  auto it = set->by_name.find(name);
  if (it != set->by_name.end()) return it->second;
  std::vector<std::string> names;
  for (const auto& p : set->list) names.push_back(p->name);
  return absl::NotFoundError(absl::StrCat(removed ? "pipeline '" : "unknown pipeline '",
                                          EscapeText(name, kClientStringCap),
                                          removed ? "' was removed by a config reload" : "'",
                                          "; this daemon serves: ", absl::StrJoin(names, ", ")));
}

PipelineList PipelineRegistry::List() const {
  MutexLock lock(&mu_);
  return current_->list;
}

void PipelineRegistry::Replace(PipelineList pipelines) {
  std::shared_ptr<const Set> next = MakeSet(std::move(pipelines));
  std::shared_ptr<const Set> old;
  MutexLock lock(&mu_);
  for (const auto& p : current_->list) {
    if (next->by_name.count(p->name) == 0) removed_.insert(p->name);
  }
  for (const auto& p : next->list) removed_.erase(p->name);
  old = std::move(current_);
  current_ = std::move(next);
  // `old` is released after the lock (declared first): the last reference
  // to a removed pipeline without streams frees its dataset index there.
}

}  // namespace conveyor::server
