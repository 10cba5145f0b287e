// TarShardSource: the SampleSource (core/data/sample_source.h) of a TarDataset
// (core/data/tar_dataset.h): sample i is the image member of its tar sample,
// fetched with one ReadRange of the given ByteRangeReader — LocalRangeReader
// for shards on disk, a remote reader for URL shards — and Prefetch hints are
// forwarded to the reader as the members' ranges, each member once until its
// Read claims it (the engine announces a sliding window, so without the mark
// every member would be hinted up to 256 times); a hint the reader refuses
// (its read-ahead budget is spent) ends the call and is given again later.
//
// Runs: when the stream reads every sample (Prefetch's every_sample), a
// hinted member is fetched with the other members of its run — the
// kRunSamples samples of its shard, in archive order, that it belongs to
// (not yet hinted, within max_file_bytes) — as one PrefetchRun, so a remote
// shard costs one request per run, not one per member. The shuffle buffer
// (core/data/shard_order.h) emits a run's members within about its size of each
// other, so a run's parts wait for their reads about as long as a shuffle
// buffer's samples wait: the read-ahead holds up to ~buffer samples' bytes,
// bounded by the reader's budget (past it, hints are refused and members
// are fetched when hinted again, or read alone).
//
// Errors: the reader's (its contract matches SampleSource's: errors of the
// system carry IsSystemError's mark and are retried); a member larger than
// max_file_bytes is ResourceExhausted naming the shard and member, an error
// of the sample, refused before reading; so is a sparse member
// (InvalidArgument). Messages name the sample's dataset-relative path
// ("SHARD/MEMBER"), never the server's absolute one: they reach clients.
//
// Thread-safety: Read, ReadAsync and Prefetch are safe concurrently (the reader's
// contract; the per-sample marks are PrefetchMarks).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/data/byte_range_reader.h"
#include "core/data/prefetch_marks.h"
#include "core/data/sample_source.h"
#include "core/data/tar_dataset.h"

namespace conveyor {

class TarShardSource final : public SampleSource {
 public:
  // REQUIRES: dataset and reader non-null.
  TarShardSource(std::shared_ptr<const TarDataset> dataset,
                 std::shared_ptr<const ByteRangeReader> reader, uint64_t max_file_bytes);

  // Samples per run (see above).
  static constexpr uint64_t kRunSamples = 16;

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override;
  // As the reader's: remote shards are read asynchronously (ReadRangeAsync).
  bool reads_asynchronously() const override { return reader_->reads_asynchronously(); }
  std::shared_ptr<PendingRead> ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                         ReadDone done) const override;
  void Prefetch(std::span<const uint64_t> upcoming, bool every_sample) const override;
  // The shard's name with the member's offset and size: shards are indexed
  // once and held open, so a member's place names its bytes for the life
  // of the dataset (a reload indexes again, with a new cache).
  bool Identity(uint64_t index, std::string* out) const override;
  // The reader of the shards (for its statistics).
  const std::shared_ptr<const ByteRangeReader>& reader() const { return reader_; }

 private:
  // ResourceExhausted naming the member when it exceeds max_file_bytes.
  absl::Status CheckSize(uint64_t index) const;
  // Hints `index` (its mark taken) with the rest of its run; false when the
  // reader refused (every mark this call took is cleared again).
  bool PrefetchWithRun(uint64_t index) const;

  std::vector<uint64_t> shard_starts_;  // first sample of each shard; const after construction
  const std::shared_ptr<const TarDataset> dataset_;
  const std::shared_ptr<const ByteRangeReader> reader_;
  const uint64_t max_file_bytes_;
  const PrefetchMarks hinted_;
};

}  // namespace conveyor
