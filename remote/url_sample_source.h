// UrlSampleSource: the Fetch stage of a dataset whose samples are URLs
// (http://, https://, s3://bucket/key; the config's dataset.urls list, one
// `URL<TAB>label` per line, loaded as a DatasetIndex whose paths are the
// URLs). Each sample is read whole through a RemoteReader; Prefetch starts
// the reads of upcoming samples (bounded by the reader's read-ahead budget)
// so workers find their bytes already there.
//
// With a cache (the daemon's `cache` section; a pipeline's `cache: false`
// opts out), reads go through a CachedObjectReader over the same remote
// reader: revalidated at open, served from local disk when unchanged. One
// CachedObjectReader is shared by every source of the daemon's remote
// reader, so concurrent misses of all its pipelines are one GET.
//
// Thread-safety: Read, ReadAsync and Prefetch may be called concurrently from any
// thread (the per-sample marks are PrefetchMarks).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/dataset_index.h"
#include "core/data/prefetch_marks.h"
#include "core/data/sample_source.h"
#include "remote/cached_object_reader.h"
#include "remote/remote_reader.h"

namespace conveyor::remote {

class UrlSampleSource final : public SampleSource {
 public:
  // InvalidArgument naming the entry (1-based) and the URL (redacted) when
  // one of `urls`' paths is not an object URL (remote/url.h).
  static absl::StatusOr<std::shared_ptr<const UrlSampleSource>> Create(
      std::shared_ptr<const DatasetIndex> urls, std::shared_ptr<const RemoteReader> reader,
      uint64_t max_file_bytes, std::shared_ptr<const CachedObjectReader> cached = nullptr);

  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override;
  // Always asynchronous: the engine reads with ReadAsync, no worker waits.
  bool reads_asynchronously() const override { return true; }
  std::shared_ptr<PendingRead> ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                         ReadDone done) const override;
  void Prefetch(std::span<const uint64_t> upcoming, bool every_sample) const override;

  UrlSampleSource(std::shared_ptr<const DatasetIndex> urls,
                  std::shared_ptr<const RemoteReader> reader, uint64_t max_file_bytes,
                  std::shared_ptr<const CachedObjectReader> cached = nullptr);

  // The reader of the URLs (for its statistics).
  const std::shared_ptr<const RemoteReader>& reader() const { return reader_; }
  // The cache the reads go through; null when none.
  const std::shared_ptr<const CachedObjectReader>& cached() const { return cached_; }

 private:
  const std::shared_ptr<const DatasetIndex> urls_;
  const std::shared_ptr<const RemoteReader> reader_;
  const uint64_t max_file_bytes_;
  const std::shared_ptr<const CachedObjectReader> cached_;  // null: no cache
  const PrefetchMarks requested_;
};

}  // namespace conveyor::remote
