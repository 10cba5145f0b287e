#include "core/data/sample_source.h"

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

}  // namespace conveyor
