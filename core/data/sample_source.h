// SampleSource: the Fetch stage's interface — turns a sample index of a
// dataset into its bytes. The default, FileSampleSource, reads the dataset's
// files whole with pread (core/data/file_reader.h); tar members and HTTP ranges
// are later implementations, and tests inject sources that fail on cue.
//
// Error contract (the engine acts on it, see EngineOptions' retry fields):
//   - errors of the sample (not found, permission, not a regular file, a
//     symbolic link below the dataset root, too large) are plain statuses:
//     the pipeline's error_policy decides;
//   - errors of the system (out of fds or memory, I/O errors: whatever
//     IsSystemError() in core/base/posix_error.h reports) are retried with
//     backoff and then end the stream with UNAVAILABLE, never a short batch.
//
// Asynchronous reads: a source whose reads wait on a network
// (reads_asynchronously() true: URLs, remote tar shards) is read by the engine
// with ReadAsync, which only starts the read: the worker goes on with other
// work, and the read's I/O thread calls `done` once the bytes are there
// (core/data/pending_read.h), so no worker ever waits on the network. Local
// sources keep the default (Read on the worker: a pread).
//
// Thread-safety: Read and ReadAsync are called concurrently from every worker
// thread, so implementations must be safe for concurrent use.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/data/dataset_index.h"
#include "core/data/file_reader.h"
#include "core/data/pending_read.h"

namespace conveyor {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Replaces *out with the bytes of sample `index` (REQUIRES: index < the
  // dataset's size). *out's capacity is reused across calls: implementations
  // should resize, not reallocate, so a warmed-up stream allocates nothing.
  virtual absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const = 0;

  // Whether reads wait on something other than this machine's disks (the
  // network): the engine then reads with ReadAsync and never holds a worker
  // for them.
  virtual bool reads_asynchronously() const { return false; }

  // Starts reading sample `index` into *out and returns at once; `done`
  // gets Read's status once *out holds the bytes (see PendingRead for when
  // and where it runs). *out is the read's until then. Returns the handle to
  // cancel it, or null when done already ran (the read finished, or failed,
  // before this returned). The default runs Read here and then done.
  virtual std::shared_ptr<PendingRead> ReadAsync(uint64_t index, std::vector<uint8_t>* out,
                                                 ReadDone done) const {
    done(Read(index, out));
    return nullptr;
  }

  // Hint: Read(index) will be called soon for each of `upcoming` (in that
  // order). Sources whose reads take long (network) start them here, with
  // bounded read-ahead, so workers find the bytes ready; local sources
  // ignore it. Called under the engine's lock (so that no hint names a
  // sample whose read already began): must not block, and should be cheap.
  // `every_sample`: the stream reads every sample of the dataset each epoch
  // (a world of one rank), so neighbours of a hinted sample that a source
  // fetches along with it (a run of tar members in one request) will be read
  // by this stream too; otherwise other ranks, perhaps on other nodes, read
  // some of them, and a source should fetch only the samples named.
  virtual void Prefetch(std::span<const uint64_t> /*upcoming*/, bool /*every_sample*/) const {}

  // Appends to *out what identifies the bytes Read(index) would return now
  // (a file's path with its size, mtime, ctime, device and inode; a tar
  // member's shard and place), so that output cached under it
  // (core/engine/output_cache.h) is never served for other bytes. Returns
  // false, *out unspecified, when the source cannot tell cheaply (the
  // default; network sources) or the sample is not a readable file: the
  // sample is then neither looked up nor cached. Cheap: one fstatat at most.
  virtual bool Identity(uint64_t /*index*/, std::string* /*out*/) const { return false; }
};

// Reads sample `index` whole, relative to the dataset's root fd and without
// following any symbolic link below the root (ReadFileBeneath): a link, a
// FIFO or any other non-regular file is an error of the sample naming why,
// never read and never waited on; files over max_file_bytes are refused
// (ResourceExhausted, an error of the sample). The reads go through
// `reader` (core/data/file_reader.h): null is plain pread; tests pass one
// that injects faults. Errors name the sample by its dataset-relative path
// ("class_a/x.jpg: symbolic link refused ..."), never the server's absolute
// one: they reach clients.
class FileSampleSource final : public SampleSource {
 public:
  // REQUIRES: dataset != nullptr.
  FileSampleSource(std::shared_ptr<const DatasetIndex> dataset, uint64_t max_file_bytes,
                   std::shared_ptr<const FileReader> reader = nullptr)
      : dataset_(std::move(dataset)), max_file_bytes_(max_file_bytes), reader_(std::move(reader)) {}
  absl::Status Read(uint64_t index, std::vector<uint8_t>* out) const override;
  bool Identity(uint64_t index, std::string* out) const override;

 private:
  const std::shared_ptr<const DatasetIndex> dataset_;
  const uint64_t max_file_bytes_;
  const std::shared_ptr<const FileReader> reader_;
};

}  // namespace conveyor
