// The dataset index: the list of samples of a dataset (relative path + integer
// label), loaded once from an ImageFolder tree or a list file and shared,
// read-only, by every stream that reads the dataset.
//
// Storage is compact so that an ImageNet-sized index (1.28 M entries) costs
// about 14 MB once per daemon instead of hundreds of MB per worker process:
// the relative paths are front- and rear-coded in blocks of 16
// (core/data/front_coded_paths.h: a path costs the bytes in which it differs from
// the one before it), and the labels are packed 1, 2 or 4 bytes each, as the
// largest label needs. No per-entry std::string.
//
// Symbolic links: the dataset root itself may be a link (the daemon's config
// check resolves it against allowed_roots), but no link BELOW the root is
// ever followed, at index time or at read time: the index holds an fd of the
// root folder, opened once by the factory, and samples are opened relative to
// it without following links (ReadFileBeneath, core/data/file_reader.h). So
// nothing a dataset contains leads outside it, even a file swapped for a link
// after indexing.
//
// Thread-safety: a DatasetIndex is immutable after its factory returns; all
// const methods are safe for concurrent use without external synchronization.
// It is handed out as std::shared_ptr<const DatasetIndex>.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/unique_fd.h"
#include "core/data/front_coded_paths.h"
#include "core/data/media_extensions.h"

namespace conveyor {

class ListColumns;  // core/data/list_columns.h

// The entries of an ImageFolder tree that are not samples, counted by reason
// when the index loads, so that an operator learns what the daemon ignores
// (the daemon logs Summary() once per dataset). A few example paths per
// reason are kept (the first in byte order), escaped (EscapeText) and capped
// in length: they come from the dataset and may hold any bytes.
struct IgnoredEntries {
  enum Reason {
    kHidden,            // name starts with '.'
    kNoImageExtension,  // in a class folder, not an extension of the dataset's kind
                        // (the summary says "image extension" for every kind)
    kNotAFolderAtRoot,  // directly under the root and not a real folder
    kNestedFolder,      // a folder inside a class folder (not descended into)
    kNumReasons,
  };
  static constexpr size_t kMaxExamples = 3;
  static constexpr size_t kMaxExampleBytes = 96;

  std::array<uint64_t, kNumReasons> counts{};
  std::array<std::vector<std::string>, kNumReasons> examples;

  void Add(Reason reason, std::string_view relative_path);
  uint64_t total() const;
  // "" when nothing was ignored, else e.g. "7 entries ignored: 5 without an
  // image extension (e.g. 'class_a/notes.txt', ...), 2 hidden (...)".
  std::string Summary() const;
  static const char* ReasonText(Reason reason);
};

class DatasetIndex {
 public:
  // One sample for FromEntries.
  struct Entry {
    std::string relative_path;
    int32_t label = 0;
  };

  // Loads an ImageFolder tree: root/<class>/<file>.
  //  - Class folders are the non-hidden directories directly under `root`;
  //    symbolic links are not followed, so a link to a folder is not a class
  //    folder (unlike torchvision). Their names, sorted in byte order, give
  //    the labels: label = position in that sorted list. Files directly under
  //    `root` are ignored.
  //  - Samples are the non-hidden entries that are not folders directly
  //    inside a class folder whose extension is in `extensions` (default:
  //    the image set .jpg .jpeg .png .ppm .pgm .bmp .tif .tiff .webp .gif;
  //    video and audio sets in core/data/media_extensions.h), compared
  //    case-insensitively (torchvision's IMG_EXTENSIONS). Symbolic links,
  //    FIFOs, sockets and devices among them are indexed but never read:
  //    fetching them is an error of the sample naming why ("symbolic link
  //    refused", "not a regular file (FIFO)"), so they are reported instead
  //    of silently dropped. Nested folders inside a class folder are not
  //    descended into (torchvision would).
  //  - Hidden means the name starts with '.'.
  //  - Every entry left out is counted in ignored() by reason.
  //  - Samples are ordered by class, then by file name in byte order.
  //  - A class folder without images keeps its label (so splits that share
  //    folder names share labels) and simply has no samples.
  // Errors (each names the path): NotFound when `root` does not exist,
  // InvalidArgument when it is not a directory, NotFound when it holds no class
  // folder or no image at all, and the errno-derived status when a directory
  // cannot be read.
  static absl::StatusOr<std::shared_ptr<const DatasetIndex>> LoadImageFolder(
      const std::string& root, std::span<const std::string_view> extensions = ImageExtensions());

  // Loads a list file: one `relative/path<TAB>label` per line, label a
  // non-negative decimal integer that fits int32. Lines ending in "\r\n" are
  // accepted. Blank lines (empty or only spaces/tabs) and lines whose first
  // character is '#' are skipped. The path is everything before the first tab
  // and may contain spaces; nothing may follow the label (but the columns
  // asked for, see below). Paths are relative to
  // `root` (default: the directory holding the list file); absolute paths,
  // empty paths and paths with a ".." component are refused since they would
  // escape root. Files are NOT checked for existence (1 M stat calls at start
  // would be slow; fetch reports a missing file, or a path through a
  // symbolic link, as a bad sample). The list file must be a regular file: it
  // is opened without blocking and anything else (a FIFO, a device, a folder)
  // is refused, so a FIFO cannot hang config loading.
  // Errors: NotFound when the list file or root is missing; InvalidArgument
  // naming the file and its type when it is not a regular file, naming
  // "file:line: reason" for a bad line and naming the file when it holds no
  // entries.
  // With `columns` (core/data/list_columns.h), lines may have more columns
  // after the label, tab-separated: those asked for are kept there, one
  // value per sample.
  static absl::StatusOr<std::shared_ptr<const DatasetIndex>> LoadListFile(
      const std::string& list_path, const std::string& root = "", ListColumns* columns = nullptr);

  // Builds an index from entries in memory (tests, other dataset formats).
  // Paths follow the list-file rules; labels must be >= 0. `class_names` may
  // be empty; if not, every label must be < class_names.size(). `root` need
  // not exist (then root_fd() is -1 and every read of a sample fails).
  static absl::StatusOr<std::shared_ptr<const DatasetIndex>> FromEntries(
      const std::string& root, const std::vector<Entry>& entries,
      std::vector<std::string> class_names = {});

  DatasetIndex(const DatasetIndex&) = delete;
  DatasetIndex& operator=(const DatasetIndex&) = delete;

  // The dataset root, without a trailing '/' (unless it is "/").
  const std::string& root() const { return root_; }

  // The root folder, opened by the factory (O_DIRECTORY; links below it are
  // never followed when samples are opened relative to it). -1 only for
  // FromEntries with a root that could not be opened.
  int root_fd() const { return root_fd_.get(); }

  size_t size() const { return paths_.size(); }

  // REQUIRES: i < size(). Decoded from the compact form on each call (one
  // block of at most 16 short paths: far below the cost of reading a sample).
  std::string relative_path(size_t i) const { return paths_.Get(i); }

  // root() + "/" + relative_path(i). REQUIRES: i < size().
  std::string FullPath(size_t i) const;

  // REQUIRES: i < size().
  int32_t label(size_t i) const {
    switch (label_width_) {
      case 1: return label_bytes_[i];
      case 2: {
        uint16_t v;
        std::memcpy(&v, label_bytes_.data() + 2 * i, sizeof(v));
        return v;
      }
      default: {
        int32_t v;
        std::memcpy(&v, label_bytes_.data() + 4 * i, sizeof(v));
        return v;
      }
    }
  }

  // ImageFolder: number of class folders (empty ones included). List file and
  // FromEntries without names: max label + 1.
  size_t num_classes() const { return num_classes_; }

  // Class folder names in label order; empty for list files.
  const std::vector<std::string>& class_names() const { return class_names_; }

  // A digest of what a sampler and a reader see: the samples' relative
  // paths and labels in index order, and their count ("sha256:" and 64 hex
  // digits). Not the root: the same dataset mounted elsewhere has the same
  // digest. Computed on the first call (about 0.1 s per million samples),
  // then kept; thread-safe.
  const std::string& ContentDigest() const;

  // Heap + object bytes held by the index (capacities, not sizes).
  size_t MemoryBytes() const;

  // ImageFolder: the entries found that are not samples. Nothing for list
  // files and FromEntries (there every line is a sample or an error).
  const IgnoredEntries& ignored() const { return ignored_; }

 private:
  DatasetIndex() = default;

  // Checks the invariants, computes num_classes_, takes the paths and packs
  // the labels (one per path, each >= 0). Every factory ends here.
  static absl::StatusOr<std::shared_ptr<const DatasetIndex>> Finish(
      std::unique_ptr<DatasetIndex> index, FrontCodedPaths::Builder paths,
      const std::vector<int32_t>& labels);

  // All constant after construction.
  std::string root_;
  UniqueFd root_fd_;
  FrontCodedPaths paths_;             // size() relative paths
  std::vector<uint8_t> label_bytes_;  // size() labels of label_width_ bytes each
  uint8_t label_width_ = 4;           // 1, 2 or 4: the fewest that hold the largest label
  std::vector<std::string> class_names_;
  size_t num_classes_ = 0;
  IgnoredEntries ignored_;
  // ContentDigest's, computed once. std::call_once rather than absl's:
  // it is pthread_once, which ThreadSanitizer sees through (the
  // distribution's prebuilt absl is not instrumented).
  mutable std::once_flag digest_once_;
  mutable std::string digest_;
};

// Whether `relative_path` is acceptable as an index entry: non-empty, not
// absolute, no ".." component, no NUL byte. On failure returns the reason.
absl::Status ValidateRelativePath(std::string_view relative_path);

// Whether `file_name` has one of the image extensions (ImageExtensions(),
// case-insensitive).
bool HasImageExtension(std::string_view file_name);

}  // namespace conveyor
