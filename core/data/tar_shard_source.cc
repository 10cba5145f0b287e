#include "core/data/tar_shard_source.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"

namespace conveyor {

TarShardSource::TarShardSource(std::shared_ptr<const TarDataset> dataset,
                               std::shared_ptr<const ByteRangeReader> reader,
                               uint64_t max_file_bytes)
    : dataset_(std::move(dataset)),
      reader_(std::move(reader)),
      max_file_bytes_(max_file_bytes),
      hinted_(dataset_->size()) {
  uint64_t start = 0;
  for (const uint64_t n : dataset_->shard_sizes()) {
    shard_starts_.push_back(start);
    start += n;
  }
}

absl::Status TarShardSource::CheckSize(uint64_t index) const {
  const TarDataset::Location& at = dataset_->location(index);
  if (at.size > max_file_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: member of %d bytes exceeds the %d-byte limit (max_file_bytes)",
        EscapeText(dataset_->index()->relative_path(index)), at.size, max_file_bytes_));
  }
  if (at.sparse) {
    return absl::InvalidArgumentError(
        absl::StrCat(EscapeText(dataset_->index()->relative_path(index)),
                     ": a sparse tar member (GNU or pax sparse file), not served"));
  }
  return absl::OkStatus();
}

absl::Status TarShardSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  if (absl::Status st = CheckSize(index); !st.ok()) return st;
  const TarDataset::Location& at = dataset_->location(index);
  absl::Status st = reader_->ReadRange(dataset_->shards()[at.shard], at.offset, at.size, out);
  hinted_.Clear(index);
  return st;
}

std::shared_ptr<PendingRead> TarShardSource::ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                                       ReadDone done) const {
  if (absl::Status st = CheckSize(index); !st.ok()) {
    done(std::move(st));
    return nullptr;
  }
  const TarDataset::Location& at = dataset_->location(index);
  // The mark is cleared when the read starts, not when it ends: it only
  // keeps Prefetch from hinting a member twice, and the read has claimed
  // whatever a hint started.
  std::shared_ptr<PendingRead> pending = reader_->ReadRangeAsync(
      dataset_->shards()[at.shard], at.offset, at.size, out, std::move(done));
  hinted_.Clear(index);
  return pending;
}

bool TarShardSource::Identity(uint64_t index, std::string* out) const {
  const TarDataset::Location& at = dataset_->location(index);
  const std::string& shard = dataset_->shards()[at.shard];
  absl::StrAppend(out, "tar:", shard.size(), ":", shard, ":", at.offset, ":", at.size, ";");
  return true;
}

void TarShardSource::Prefetch(std::span<const uint64_t> upcoming, bool every_sample) const {
  for (const uint64_t index : upcoming) {
    const TarDataset::Location& at = dataset_->location(index);
    if (at.size > max_file_bytes_) continue;
    if (!hinted_.Take(index)) continue;
    const bool started = every_sample
                             ? PrefetchWithRun(index)
                             : reader_->Prefetch(dataset_->shards()[at.shard], at.offset, at.size);
    if (!started) {
      hinted_.Clear(index);
      return;  // the read-ahead budget is spent
    }
  }
}

bool TarShardSource::PrefetchWithRun(uint64_t index) const {
  const TarDataset::Location& at = dataset_->location(index);
  const uint64_t shard_first = shard_starts_[at.shard];
  const uint64_t shard_end = shard_first + dataset_->shard_sizes()[at.shard];
  const uint64_t run_first = shard_first + (index - shard_first) / kRunSamples * kRunSamples;
  const uint64_t run_end = std::min(run_first + kRunSamples, shard_end);
  struct Part {
    ByteRangeReader::Range range;
    uint64_t index;
  };
  std::array<Part, kRunSamples> parts;
  size_t n = 0;
  for (uint64_t k = run_first; k < run_end; ++k) {
    const TarDataset::Location& loc = dataset_->location(k);
    if (k != index && (loc.size > max_file_bytes_ || !hinted_.Take(k))) continue;
    parts[n++] = Part{{loc.offset, loc.size}, k};
  }
  // Archive order is offset order for WebDataset shards; sorted in case a
  // shard interleaves its samples' members.
  std::sort(parts.begin(), parts.begin() + static_cast<ptrdiff_t>(n),
            [](const Part& a, const Part& b) { return a.range.offset < b.range.offset; });
  std::array<ByteRangeReader::Range, kRunSamples> ranges;
  for (size_t i = 0; i < n; ++i) ranges[i] = parts[i].range;
  if (reader_->PrefetchRun(dataset_->shards()[at.shard],
                           std::span<const ByteRangeReader::Range>(ranges.data(), n))) {
    return true;
  }
  for (size_t i = 0; i < n; ++i) {
    if (parts[i].index != index) hinted_.Clear(parts[i].index);
  }
  return false;
}

}  // namespace conveyor
