#include "remote/url_sample_source.h"

#include "absl/strings/str_cat.h"
#include "core/data/await_read.h"
#include "remote/url.h"

namespace conveyor::remote {

absl::StatusOr<std::shared_ptr<const UrlSampleSource>> UrlSampleSource::Create(
    std::shared_ptr<const DatasetIndex> urls, std::shared_ptr<const RemoteReader> reader,
    uint64_t max_file_bytes, std::shared_ptr<const CachedObjectReader> cached) {
  for (size_t i = 0; i < urls->size(); ++i) {
    absl::StatusOr<ObjectUrl> u = ParseObjectUrl(urls->relative_path(i));
    if (!u.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i + 1, ": ", u.status().message()));
    }
  }
  return std::make_shared<const UrlSampleSource>(std::move(urls), std::move(reader), max_file_bytes,
                                                 std::move(cached));
}

UrlSampleSource::UrlSampleSource(std::shared_ptr<const DatasetIndex> urls,
                                 std::shared_ptr<const RemoteReader> reader,
                                 uint64_t max_file_bytes,
                                 std::shared_ptr<const CachedObjectReader> cached)
    : urls_(std::move(urls)),
      reader_(std::move(reader)),
      max_file_bytes_(max_file_bytes),
      cached_(std::move(cached)),
      requested_(urls_->size()) {}

absl::Status UrlSampleSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  if (cached_ != nullptr) {
    // The asynchronous read, waited for.
    return AwaitRead([&](ReadDone done) { return ReadAsync(index, out, std::move(done)); });
  }
  absl::Status st = reader_->ReadWhole(urls_->relative_path(index), max_file_bytes_, out);
  requested_.Clear(index);
  return st;
}

std::shared_ptr<PendingRead> UrlSampleSource::ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                                        ReadDone done) const {
  std::shared_ptr<PendingRead> pending =
      cached_ != nullptr ? cached_->ReadWholeAsync(urls_->relative_path(index), max_file_bytes_,
                                                   out, std::move(done))
                         : reader_->ReadWholeAsync(urls_->relative_path(index), max_file_bytes_,
                                                   out, std::move(done));
  requested_.Clear(index);  // (as TarShardSource::ReadAsync's mark)
  return pending;
}

void UrlSampleSource::Prefetch(std::span<const uint64_t> upcoming, bool /*every_sample*/) const {
  for (const uint64_t index : upcoming) {
    if (index >= urls_->size()) continue;
    if (!requested_.Take(index)) continue;
    const bool started = cached_ != nullptr
                             ? cached_->PrefetchWhole(urls_->relative_path(index), max_file_bytes_)
                             : reader_->PrefetchWhole(urls_->relative_path(index), max_file_bytes_);
    if (!started) {
      requested_.Clear(index);
      return;  // the read-ahead budget is spent
    }
  }
}

}  // namespace conveyor::remote
