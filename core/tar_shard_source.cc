#include "core/tar_shard_source.h"

#include "absl/strings/str_format.h"
#include "core/text_escape.h"

namespace conveyor {

absl::Status TarShardSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  const TarDataset::Location& at = dataset_->location(index);
  if (at.size > max_file_bytes_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: member of %d bytes exceeds the %d-byte limit (max_file_bytes)",
        EscapeText(dataset_->index()->FullPath(index)), at.size, max_file_bytes_));
  }
  absl::Status st = reader_->ReadRange(dataset_->shards()[at.shard], at.offset, at.size, out);
  hinted_.Clear(index);
  return st;
}

void TarShardSource::Prefetch(std::span<const uint64_t> upcoming) const {
  for (const uint64_t index : upcoming) {
    const TarDataset::Location& at = dataset_->location(index);
    if (at.size > max_file_bytes_) continue;
    if (!hinted_.Take(index)) continue;
    if (!reader_->Prefetch(dataset_->shards()[at.shard], at.offset, at.size)) {
      hinted_.Clear(index);
      return;  // the read-ahead budget is spent
    }
  }
}

}  // namespace conveyor
