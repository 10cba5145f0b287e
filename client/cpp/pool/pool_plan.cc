#include "client/cpp/pool/pool_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace conveyor::client {

absl::StatusOr<RangePlan> RangePlan::Create(const RangePlanOptions& o) {
  if (o.batch_size == 0 || o.world_size == 0 || o.range_batches == 0 || o.dataset_size == 0) {
    return absl::InvalidArgumentError(
        "a pool stream needs batch_size, world_size, range_batches and a dataset size above 0");
  }
  RangePlan plan(o);
  if (plan.samples_of(o.first_epoch) == 0 || plan.samples_of(o.first_epoch + 1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("epoch ", o.first_epoch, " from offset ", o.resume_offset,
                     " leaves no samples for a ", o.world_size, "-way share of a dataset of ",
                     o.dataset_size, " samples (drop_last ", o.drop_last ? "true" : "false", ")"));
  }
  plan.first_batches_ = plan.batches_of(o.first_epoch);
  plan.later_batches_ = plan.batches_of(o.first_epoch + 1);
  if (o.num_epochs > 0)
    plan.total_ = plan.first_batches_ + (o.num_epochs - 1) * plan.later_batches_;
  return plan;
}

uint64_t RangePlan::samples_of(uint64_t epoch) const {
  const uint64_t b = base(epoch);
  if (b >= o_.dataset_size) return 0;
  const uint64_t left = o_.dataset_size - b;
  return o_.drop_last ? left / o_.world_size : (left + o_.world_size - 1) / o_.world_size;
}

uint64_t RangePlan::batches_of(uint64_t epoch) const {
  return (samples_of(epoch) + o_.batch_size - 1) / o_.batch_size;
}

uint64_t RangePlan::epochs_left(uint64_t epoch) const {
  return o_.num_epochs == 0 ? 0 : o_.first_epoch + o_.num_epochs - epoch;
}

BatchRange RangePlan::RangeAt(uint64_t g, uint64_t count) const {
  uint64_t epoch = o_.first_epoch, k = g;
  if (g >= first_batches_) {
    const uint64_t later = g - first_batches_;
    epoch = o_.first_epoch + 1 + later / later_batches_;
    k = later % later_batches_;
  }
  BatchRange r;
  r.g = g;
  r.count = count;
  r.epoch = epoch;
  r.first = k;
  r.offset = base(epoch) + k * o_.batch_size * o_.world_size;
  r.epoch_samples = samples_of(epoch);
  r.position0 = k * o_.batch_size;
  return r;
}

std::optional<BatchRange> RangePlan::Next() {
  uint64_t count = o_.range_batches;
  if (total_.has_value()) {
    if (next_ >= *total_) return std::nullopt;
    count = std::min<uint64_t>(count, *total_ - next_);
  }
  BatchRange r = RangeAt(next_, count);
  next_ += count;
  return r;
}

uint32_t AutoRangeBatches(const v1::PipelineInfo& info, uint32_t batch_size, uint32_t ranges_ahead,
                          uint64_t buffer_bytes) {
  uint64_t sample = info.dtype() == v1::UINT8 ? 1 : info.dtype() == v1::FLOAT32 ? 4 : 2;
  for (int64_t d : info.sample_shape()) sample *= static_cast<uint64_t>(std::max<int64_t>(d, 1));
  const uint64_t batch = std::max<uint64_t>(sample * batch_size, 1);
  const uint64_t fit = buffer_bytes / (std::max<uint32_t>(ranges_ahead, 1) * batch);
  return static_cast<uint32_t>(std::clamp<uint64_t>(fit, 1, 16));
}

namespace {

// "a=1;b=2;v1" -> {a: 1, b: 2}, in order (items without '=' left out).
std::vector<std::pair<std::string, std::string>> Fields(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipEmpty())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos) continue;
    out.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
  }
  return out;
}

}  // namespace

std::optional<std::string> FingerprintDifference(const v1::PipelineInfo& a,
                                                 const v1::PipelineInfo& b) {
  if (a.dataset_size() != b.dataset_size()) {
    return absl::StrCat("dataset_size (", a.dataset_size(), " vs ", b.dataset_size(), ")");
  }
  const std::vector<int64_t> sa(a.sample_shape().begin(), a.sample_shape().end());
  const std::vector<int64_t> sb(b.sample_shape().begin(), b.sample_shape().end());
  if (sa != sb) {
    return absl::StrCat("sample_shape ([", absl::StrJoin(sa, ", "), "] vs [",
                        absl::StrJoin(sb, ", "), "])");
  }
  if (a.dtype() != b.dtype()) return absl::StrCat("dtype (", a.dtype(), " vs ", b.dtype(), ")");
  if (a.layout() != b.layout()) {
    return absl::StrCat("layout (", a.layout(), " vs ", b.layout(), ")");
  }
  if (a.kind() != b.kind()) return absl::StrCat("kind (", a.kind(), " vs ", b.kind(), ")");
  if (b.fingerprint().empty() && !a.fingerprint().empty()) {
    return std::string("fingerprint (the daemon reports none: an older conveyord)");
  }
  std::set<std::string> parts;
  for (const auto& [k, v] : a.fingerprint()) parts.insert(k);
  for (const auto& [k, v] : b.fingerprint()) parts.insert(k);
  for (const std::string& part : parts) {
    const auto ia = a.fingerprint().find(part), ib = b.fingerprint().find(part);
    if (ia == a.fingerprint().end() || ib == b.fingerprint().end()) {
      return absl::StrCat(part, " (present on one daemon only)");
    }
    if (ia->second == ib->second) continue;
    const auto fa = Fields(ia->second), fb = Fields(ib->second);
    if (!fa.empty() && !fb.empty()) {
      const std::map<std::string, std::string> ma(fa.begin(), fa.end()), mb(fb.begin(), fb.end());
      std::vector<std::string> names;
      for (const auto& [k, v] : fa) names.push_back(k);
      for (const auto& [k, v] : fb) {
        if (!ma.count(k)) names.push_back(k);
      }
      for (const std::string& name : names) {
        const auto xa = ma.find(name), xb = mb.find(name);
        const std::string va = xa == ma.end() ? "None" : xa->second;
        const std::string vb = xb == mb.end() ? "None" : xb->second;
        if (va != vb) return absl::StrCat(part, " (", name, ": ", va, " vs ", vb, ")");
      }
    }
    return absl::StrCat(part, " (", ia->second, " vs ", ib->second, ")");
  }
  return std::nullopt;
}

}  // namespace conveyor::client
