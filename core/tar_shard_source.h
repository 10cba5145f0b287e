// TarShardSource: the SampleSource (core/sample_source.h) of a TarDataset
// (core/tar_dataset.h): sample i is the image member of its tar sample,
// fetched with one ReadRange of the given ByteRangeReader — LocalRangeReader
// for shards on disk, a remote reader for URL shards — and Prefetch hints are
// forwarded to the reader as the members' ranges.
//
// Errors: the reader's (its contract matches SampleSource's: errors of the
// system carry IsSystemError's mark and are retried); a member larger than
// max_file_bytes is ResourceExhausted naming the shard and member, an error
// of the sample, refused before reading.
//
// Thread-safety: immutable; Read and Prefetch are safe concurrently (the
// reader's contract).
#pragma once

#include <memory>

#include "core/byte_range_reader.h"
#include "core/sample_source.h"
#include "core/tar_dataset.h"

namespace conveyor {

class TarShardSource final : public SampleSource {
 public:
  // REQUIRES: dataset and reader non-null.
  TarShardSource(std::shared_ptr<const TarDataset> dataset,
                 std::shared_ptr<const ByteRangeReader> reader, uint64_t max_file_bytes)
      : dataset_(std::move(dataset)), reader_(std::move(reader)), max_file_bytes_(max_file_bytes) {}

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override;
  void Prefetch(std::span<const uint64_t> upcoming) const override;

 private:
  const std::shared_ptr<const TarDataset> dataset_;
  const std::shared_ptr<const ByteRangeReader> reader_;
  const uint64_t max_file_bytes_;
};

}  // namespace conveyor
