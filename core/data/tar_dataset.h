// TarDataset: a dataset of WebDataset tar shards — the shards' headers
// scanned once (core/data/tar_index.h), their members grouped into samples, and
// where each sample's image lies (shard, offset, size) so that fetching it is
// one ranged read (TarShardSource, core/data/tar_shard_source.h).
//
// Grouping (WebDataset's rule): a member's key is its path up to the first
// '.' of its last component, the rest is its extension: `dir/000123.jpg` and
// `dir/000123.cls` are the members "jpg" and "cls" of sample `dir/000123`.
// Members whose last component has no '.' or starts with one are not part of
// any sample (counted as ignored). Keys are per shard; samples keep the order
// of their first member in the shard, shards the order given.
//  - The image is the sample's member whose extension (compared in lower
//    case) is, by preference, jpg, jpeg, png, webp, ppm, pgm, bmp, tif, tiff.
//    A sample without one is left out (counted as ignored).
//  - The label is the member whose extension is `label_key` (default "cls"),
//    holding a non-negative decimal integer that fits int32, optionally
//    surrounded by ASCII whitespace (at most 64 bytes). A sample with an image
//    but no label member, or a label that is not such an integer, is an
//    error naming the shard and the member. An empty `label_key`: samples
//    have no label member, and every label is 0 (captioned image shards).
//  - Field members (`field_members`, core/data/sample_fields.h): the members
//    of those extensions are read with the image. Location is then the span
//    of the shard from the first of the sample's image and field members to
//    the end of the last (WebDataset writes a sample's members together, so
//    the span is about their sizes), and SampleParts cuts it into the image
//    and the fields. A sample may lack a field member; a sparse one is an
//    error at load, like a sparse label.
//  - Two members with the same key and extension in one shard are an error,
//    and so are two label members, or two image members of the same
//    extension, whose extensions differ only in case (000.cls / 000.CLS):
//    "SHARD: offset N: sample 'KEY': members 'A' and 'B' differ only in the
//    case of their extension".
//  - Sparse members (core/data/tar_index.h) are not served: a sample whose
//    image is one is indexed and its read fails (an error of that sample
//    naming the member), a sparse label member is an error at load; one
//    warning per shard names the first of them.
//
// The index is kept in memory (shared by every pipeline naming the same
// shards, label key and shuffle buffer); nothing is written beside the
// shards. `index()` is a DatasetIndex (labels, sizes, the names used in
// per-sample errors): its root is the folder common to all shards and the
// path of sample i is "<shard path below root>/<image member>", so errors
// and batch file lists name the shard and the member.
//
// Thread-safety: immutable after Load; const methods are safe concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/byte_range_reader.h"
#include "core/data/dataset_index.h"
#include "core/data/sample_fields.h"
#include "core/data/tar_index.h"

namespace conveyor {

struct TarDatasetOptions {
  std::string label_key = "cls";  // extension of the label member; empty: none
  // Extensions (lower case) of the members read with the image, in the
  // order of the pipeline's fields; a field without a member (a key) is "".
  std::vector<std::string> field_members;
  TarScanLimits limits;
};

class TarDataset final : public SampleParts {
 public:
  // What is read for a sample: its image member, or with field members the
  // span from the first of its members to the end of the last.
  struct Location {
    uint32_t shard = 0;   // into shards()
    bool sparse = false;  // a sparse member: refused when read
    uint64_t offset = 0;
    uint64_t size = 0;
  };

  // Scans every shard (absolute paths or URLs, else InvalidArgument) through
  // `reader`. Errors are
  // ScanTar's ("SHARD: offset N: reason"), the grouping errors above
  // ("SHARD: sample 'KEY': reason"), and NotFound when the shards hold no
  // sample at all (or `shards` is empty).
  static absl::StatusOr<std::shared_ptr<const TarDataset>> Load(
      const std::vector<std::string>& shards, const ByteRangeReader& reader,
      const TarDatasetOptions& options);

  const std::shared_ptr<const DatasetIndex>& index() const { return index_; }
  size_t size() const { return locations_.size(); }
  // REQUIRES: i < size().
  const Location& location(size_t i) const { return locations_[i]; }
  const std::vector<std::string>& shards() const { return shards_; }
  // Samples per shard, in shard order (sum = size(); a shard may have 0).
  const std::vector<uint64_t>& shard_sizes() const { return shard_sizes_; }
  // Members and entries that belong to no sample (see above), all shards.
  uint64_t ignored() const { return ignored_; }
  // What the load found worth an operator's eye but not an error ("SHARD:
  // offset N: ..."): data after the end of an archive, sparse members.
  const std::vector<std::string>& warnings() const { return warnings_; }

  // SampleParts: the image and the field members within a Location's bytes;
  // the key is the sample's tar key ("dir/000123" for dir/000123.jpg).
  std::span<const uint8_t> Media(uint64_t index, std::span<const uint8_t> read) const override;
  std::optional<std::span<const uint8_t>> Member(uint64_t index, std::string_view member,
                                                 std::span<const uint8_t> read) const override;
  void Key(uint64_t index, std::string* out) const override;

 private:
  TarDataset() = default;

  // A member within its sample's Location; offset kAbsent: no such member.
  struct Part {
    uint32_t offset = 0;
    uint32_t size = 0;
  };
  static constexpr uint32_t kAbsent = UINT32_MAX;
  // The part `p` (0: the image, 1 + f: field f) of sample i, within `read`;
  // nullopt when absent or when `read` is not the Location's size (a source
  // that read something else).
  // Appends sample `key` of shard number `shard_number` (its Location and,
  // with field members, its parts). `fields`: into `members`, -1 none.
  absl::Status AddSample(size_t shard_number, const std::string& shard, std::string_view key,
                         const TarMember& image, const std::vector<int>& fields,
                         const std::vector<TarMember>& members);
  std::optional<std::span<const uint8_t>> PartOf(uint64_t i, size_t p,
                                                 std::span<const uint8_t> read) const;

  // All constant after Load.
  std::vector<std::string> shards_;
  std::vector<uint64_t> shard_sizes_;
  std::vector<Location> locations_;
  // With field members: 1 + field_members.size() parts per sample.
  size_t parts_per_sample_ = 0;
  std::vector<Part> parts_;
  std::vector<uint32_t> shard_name_sizes_;  // of each shard's path below the root
  std::vector<std::string> field_members_;  // TarDatasetOptions::field_members, lower case
  std::shared_ptr<const DatasetIndex> index_;
  uint64_t ignored_ = 0;
  std::vector<std::string> warnings_;
};

// The folder common to every path of `paths` (absolute, normalised): "/" at
// worst. For one path, its folder.
std::string CommonFolder(const std::vector<std::string>& paths);

}  // namespace conveyor
