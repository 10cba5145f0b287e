// Fuzz target: bytes as a tar shard, scanned by ScanTar (core/data/tar_index.h)
// and grouped into samples by TarDataset::Load (core/data/tar_dataset.h), through
// an in-memory ByteRangeReader with small chunks (so headers straddle reads).
// Properties: no sanitizer report; a refusal of the scan is InvalidArgument
// "/fuzz.tar: offset N: ..." ; accepted members lie inside the shard, start
// on a block boundary after their header, and have acceptable names; a
// loaded dataset's samples point inside the shard and scanning repeats
// exactly; loaded with field members, every sample's media and members lie
// inside the span it reads.
#include <span>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/data/dataset_index.h"
#include "core/data/tar_dataset.h"
#include "core/data/tar_index.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

class MemoryReader final : public conveyor::ByteRangeReader {
 public:
  MemoryReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  absl::StatusOr<uint64_t> Size(std::string_view) const override { return size_; }
  absl::Status ReadRange(std::string_view, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override {
    if (offset > size_ || length > size_ - offset) return absl::OutOfRangeError("past the end");
    out->assign(data_ + offset, data_ + offset + length);
    return absl::OkStatus();
  }

 private:
  const uint8_t* const data_;
  const size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace conveyor;
  MemoryReader reader(data, size);
  TarScanLimits limits;
  limits.chunk_bytes = 1024;
  limits.max_name_bytes = 2048;
  limits.max_pax_bytes = 4096;
  auto want = [](std::string_view name) {
    return name.size() >= 4 && name.substr(name.size() - 4) == ".cls";
  };
  absl::StatusOr<TarScan> scan = ScanTar(reader, "/fuzz.tar", limits, want);
  if (!scan.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(scan.status()));
    FUZZ_CHECK(absl::StartsWith(scan.status().message(), "/fuzz.tar: offset "));
  } else {
    for (const TarMember& m : scan->members) {
      FUZZ_CHECK(m.offset == m.header_offset + 512 || m.offset > m.header_offset);
      FUZZ_CHECK(m.offset % 512 == 0);
      FUZZ_CHECK(m.offset <= size && m.size <= size - m.offset);
      FUZZ_CHECK(ValidateRelativePath(m.name).ok());
      FUZZ_CHECK(m.data.size() <= limits.max_data_bytes);
    }
    absl::StatusOr<TarScan> again = ScanTar(reader, "/fuzz.tar", limits, want);
    FUZZ_CHECK(again.ok() && again->members.size() == scan->members.size());
  }
  TarDatasetOptions options;
  options.limits = limits;
  absl::StatusOr<std::shared_ptr<const TarDataset>> dataset =
      TarDataset::Load({"/fuzz.tar"}, reader, options);
  if (dataset.ok()) {
    FUZZ_CHECK(scan.ok());
    FUZZ_CHECK((*dataset)->size() == (*dataset)->index()->size());
    for (size_t i = 0; i < (*dataset)->size(); ++i) {
      const TarDataset::Location& at = (*dataset)->location(i);
      FUZZ_CHECK(at.shard == 0 && at.offset <= size && at.size <= size - at.offset);
      FUZZ_CHECK((*dataset)->index()->label(i) >= 0);
    }
  } else {
    FUZZ_CHECK(!dataset.status().message().empty());
  }
  // With field members and no labels: every sample's parts lie inside the
  // span its Location reads, and its key is a prefix of its name's member.
  options.label_key = "";
  options.field_members = {"cls", "txt", ""};
  absl::StatusOr<std::shared_ptr<const TarDataset>> fields =
      TarDataset::Load({"/fuzz.tar"}, reader, options);
  if (fields.ok()) {
    const TarDataset& d = **fields;
    std::vector<uint8_t> read;
    std::string key;
    for (size_t i = 0; i < d.size(); ++i) {
      const TarDataset::Location& at = d.location(i);
      FUZZ_CHECK(at.offset <= size && at.size <= size - at.offset);
      FUZZ_CHECK(reader.ReadRange("", at.offset, at.size, &read).ok());
      const std::span<const uint8_t> bytes(read);
      const std::span<const uint8_t> media = d.Media(i, bytes);
      FUZZ_CHECK(media.data() >= bytes.data() &&
                 media.data() + media.size() <= bytes.data() + bytes.size());
      for (const char* member : {"cls", "txt", "", "jpg"}) {
        if (auto m = d.Member(i, member, bytes); m.has_value()) {
          FUZZ_CHECK(member[0] != '\0' && member[0] != 'j');
          FUZZ_CHECK(m->data() >= bytes.data() &&
                     m->data() + m->size() <= bytes.data() + bytes.size());
        }
      }
      d.Key(i, &key);
      FUZZ_CHECK(d.index()->relative_path(i).find(key) != std::string::npos);
    }
  }
  return 0;
}
