#include "core/sample_source.h"

#include "core/file_reader.h"

namespace conveyor {

absl::Status FileSampleSource::Read(uint64_t index, std::vector<uint8_t>* out) const {
  return ReadWholeFile(dataset_->FullPath(index), max_file_bytes_, out);
}

}  // namespace conveyor
