#include "core/data/sample_source.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "core/data/file_reader.h"

namespace conveyor {

absl::Status FileSampleSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  if (dataset_->root_fd() < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(dataset_->relative_path(index), ": the dataset root could not be opened"));
  }
  // Its messages name the path below the root: they reach clients (failure
  // reasons, statuses), which need not learn the server's folders.
  return ReadFileBeneath(dataset_->root_fd(), dataset_->root(), dataset_->relative_path(index),
                         max_file_bytes_, out, reader_ != nullptr ? *reader_ : DefaultFileReader());
}

bool FileSampleSource::Identity(uint64_t index, std::string* out) const {
  if (dataset_->root_fd() < 0) return false;
  const std::string path = dataset_->relative_path(index);
  struct stat st;
  // Not following a link at the end: Read refuses links, so no output is
  // ever cached for one.
  if (::fstatat(dataset_->root_fd(), path.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
      !S_ISREG(st.st_mode)) {
    return false;
  }
  const std::string full = absl::StrCat(dataset_->root(), "/", path);
  // Length-prefixed: the key's next part cannot run into the name.
  absl::StrAppend(out, "file:", full.size(), ":", full, ":", st.st_size, ":", st.st_mtim.tv_sec,
                  ".", st.st_mtim.tv_nsec, ":", st.st_ctim.tv_sec, ".", st.st_ctim.tv_nsec, ":",
                  st.st_dev, ":", st.st_ino, ";");
  return true;
}

}  // namespace conveyor
