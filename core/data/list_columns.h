// ListColumns: the extra columns of a list file's lines, kept for the
// sample fields that read them (`relative/path<TAB>label<TAB>col2<TAB>...`;
// core/data/sample_fields.h: a field whose member is "#N" reads column N,
// the path being column 0 and the label column 1). Filled by
// DatasetIndex::LoadListFile for the columns asked for, one value per
// sample and column, in index order; a line with fewer columns has none
// (the field is then absent for that sample).
//
// Memory: the values' bytes once, plus 9 bytes per sample and column.
//
// ListFileParts is the SampleParts of such a dataset: its media is the
// whole file read, a "#N" member is column N from memory, its key the
// sample's path.
//
// Thread-safety: immutable once loaded; const methods are safe concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/dataset_index.h"
#include "core/data/sample_fields.h"

namespace conveyor {

class ListColumns {
 public:
  // The columns to keep (each ≥ 2), in any order, each once.
  explicit ListColumns(std::vector<uint32_t> wanted) : wanted_(std::move(wanted)) {}

  const std::vector<uint32_t>& wanted() const { return wanted_; }
  // Column `column` of sample `index`; nullopt when its line had no such
  // column, or the column was not asked for.
  std::optional<std::string_view> Value(uint64_t index, uint32_t column) const;

  // Loading (DatasetIndex::LoadListFile): the extra columns of the next
  // sample's line, `rest` being everything after its label (its tab
  // included; empty when there is nothing).
  void AddLine(std::string_view rest);
  size_t size() const { return wanted_.empty() ? 0 : starts_.size() / wanted_.size(); }

 private:
  std::vector<uint32_t> wanted_;
  std::string bytes_;
  // Per sample and wanted column: where its value starts in bytes_ (it ends
  // where the next one starts), and whether the line had it.
  std::vector<uint64_t> starts_;
  std::vector<uint8_t> present_;
};

// Member names of list-file columns: "#N".
std::string ColumnMember(uint32_t column);
// N of a "#N" member; nullopt for any other name.
std::optional<uint32_t> ColumnOfMember(std::string_view member);

class ListFileParts final : public SampleParts {
 public:
  ListFileParts(std::shared_ptr<const DatasetIndex> names,
                std::shared_ptr<const ListColumns> columns)
      : names_(std::move(names)), columns_(std::move(columns)) {}
  std::span<const uint8_t> Media(uint64_t, std::span<const uint8_t> read) const override {
    return read;
  }
  std::optional<std::span<const uint8_t>> Member(uint64_t index, std::string_view member,
                                                 std::span<const uint8_t> read) const override;
  void Key(uint64_t index, std::string* out) const override;

 private:
  const std::shared_ptr<const DatasetIndex> names_;
  const std::shared_ptr<const ListColumns> columns_;
};

}  // namespace conveyor
