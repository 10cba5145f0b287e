// WebDataset grouping of tar members into samples. See tar_dataset.h.
#include "core/data/tar_dataset.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/data/media_extensions.h"

namespace conveyor {
namespace {

constexpr uint64_t kMaxLabelBytes = 64;

// The rank of `ext` (lower case, without its '.') among the image
// extensions by preference (a sample with several uses the first), -1 for
// none; TarImageExtensions() lists them with their dots.
int ImageRank(std::string_view ext) {
  const std::span<const std::string_view> images = TarImageExtensions();
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i].substr(1) == ext) return static_cast<int>(i);
  }
  return -1;
}

// Splits `name` at the first '.' of its last component: false when there is
// none or the component starts with '.'.
bool SplitKey(std::string_view name, std::string_view* key, std::string* ext) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *ext = absl::AsciiStrToLower(absl::string_view(name.data() + dot + 1, name.size() - dot - 1));
  return true;
}

bool ParseLabel(std::string_view text, int32_t* label) {
  size_t b = 0, e = text.size();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (b < e && space(text[b])) ++b;
  while (e > b && space(text[e - 1])) --e;
  if (b == e || e - b > 10) return false;
  int64_t v = 0;
  for (size_t i = b; i < e; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  if (v > std::numeric_limits<int32_t>::max()) return false;
  *label = static_cast<int32_t>(v);
  return true;
}

}  // namespace

std::string CommonFolder(const std::vector<std::string>& paths) {
  std::string common;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string folder = paths[i].substr(0, paths[i].rfind('/'));
    if (i == 0) {
      common = folder;
      continue;
    }
    // Shorten `common` to whole components that prefix `folder`.
    while (!common.empty() && !(folder.compare(0, common.size(), common) == 0 &&
                                (folder.size() == common.size() || folder[common.size()] == '/'))) {
      common.resize(common.rfind('/'));
    }
  }
  return common.empty() ? "/" : common;
}

absl::StatusOr<std::shared_ptr<const TarDataset>> TarDataset::Load(
    const std::vector<std::string>& shards, const ByteRangeReader& reader,
    const TarDatasetOptions& options) {
  for (const std::string& shard : shards) {
    if (shard.empty() || (shard.front() != '/' && shard.find("://") == std::string::npos)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard path '", EscapeText(shard), "' is neither absolute nor a URL"));
    }
  }
  std::unique_ptr<TarDataset> d(new TarDataset());
  d->shards_ = shards;
  const std::string root = CommonFolder(shards);
  const std::string label_key = absl::AsciiStrToLower(options.label_key);
  const bool labelled = !label_key.empty();
  std::vector<std::string> field_members;
  for (const std::string& m : options.field_members) {
    field_members.push_back(absl::AsciiStrToLower(m));
  }
  const size_t num_fields = field_members.size();
  d->field_members_ = field_members;
  if (num_fields > 0) d->parts_per_sample_ = 1 + num_fields;
  TarScanLimits limits = options.limits;
  limits.max_data_bytes = kMaxLabelBytes;
  std::vector<DatasetIndex::Entry> entries;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string& shard = shards[s];
    auto want = [&](std::string_view name) {
      std::string_view key;
      std::string ext;
      return labelled && SplitKey(name, &key, &ext) && ext == label_key;
    };
    ASSIGN_OR_RETURN(TarScan scan, ScanTar(reader, shard, limits, want));
    d->ignored_ += scan.ignored;
    for (std::string& w : scan.warnings) d->warnings_.push_back(std::move(w));
    struct Group {
      std::string_view key;
      int image = -1;  // into scan.members
      int image_rank = 0;
      int label = -1;
      std::vector<int> fields;  // into scan.members, -1: none
    };
    std::vector<Group> groups;
    uint64_t sparse = 0;  // sparse members of this shard, for one warning
    const TarMember* first_sparse = nullptr;
    std::unordered_map<std::string_view, size_t> by_key;
    std::unordered_set<std::string_view> names;
    for (size_t m = 0; m < scan.members.size(); ++m) {
      const TarMember& member = scan.members[m];
      std::string_view key;
      std::string ext;
      if (!SplitKey(member.name, &key, &ext)) {
        ++d->ignored_;
        continue;
      }
      if (!names.insert(member.name).second) {
        return absl::InvalidArgumentError(absl::StrCat(shard, ": offset ", member.header_offset,
                                                       ": member '", EscapeText(member.name),
                                                       "' appears twice in the shard"));
      }
      if (member.sparse && sparse++ == 0) first_sparse = &member;
      auto [it, fresh] = by_key.emplace(key, groups.size());
      if (fresh) groups.push_back(Group{key, -1, 0, -1, std::vector<int>(num_fields, -1)});
      Group& g = groups[it->second];
      // Two members of one role whose extensions differ only in case
      // (000.cls, 000.CLS): which one is meant is anyone's guess.
      auto same_role = [&](int other) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard, ": offset ", member.header_offset, ": sample '", EscapeText(key), "': members '",
            EscapeText(scan.members[other].name), "' and '", EscapeText(member.name),
            "' differ only in the case of their extension (one role, "
            "two members)"));
      };
      for (size_t f = 0; f < num_fields; ++f) {
        if (field_members[f].empty() || ext != field_members[f]) continue;
        if (g.fields[f] >= 0) return same_role(g.fields[f]);
        g.fields[f] = static_cast<int>(m);
      }
      if (labelled && ext == label_key) {
        if (g.label >= 0) return same_role(g.label);
        g.label = static_cast<int>(m);
      } else if (const int rank = ImageRank(ext); rank >= 0) {
        if (g.image >= 0 && rank == g.image_rank) return same_role(g.image);
        if (g.image < 0 || rank < g.image_rank) {
          g.image = static_cast<int>(m);
          g.image_rank = rank;
        }
      }
    }
    if (sparse > 0) {
      d->warnings_.push_back(absl::StrCat(
          shard, ": offset ", first_sparse->header_offset, ": ", sparse,
          " sparse member(s), e.g. '", EscapeText(first_sparse->name),
          "': sparse files are not served (each such image fails as its sample's error)"));
    }
    std::string shard_rel = shard.substr(root == "/" ? 1 : root.size() + 1);
    d->shard_name_sizes_.push_back(static_cast<uint32_t>(shard_rel.size()));
    uint64_t count = 0;
    for (const Group& g : groups) {
      if (g.image < 0) {
        ++d->ignored_;
        continue;
      }
      const TarMember& image = scan.members[g.image];
      if (!labelled) {
        RETURN_IF_ERROR(d->AddSample(s, shard, g.key, image, g.fields, scan.members));
        entries.push_back(DatasetIndex::Entry{absl::StrCat(shard_rel, "/", image.name), 0});
        ++count;
        continue;
      }
      if (g.label < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(shard, ": sample '", EscapeText(g.key), "': no '.", label_key,
                         "' member holding its label (dataset.label_key)"));
      }
      const TarMember& label = scan.members[g.label];
      if (label.sparse) {
        return absl::InvalidArgumentError(absl::StrCat(shard, ": offset ", label.header_offset,
                                                       ": label member '", EscapeText(label.name),
                                                       "' is a sparse file (not supported)"));
      }
      int32_t value = 0;
      if (!ParseLabel(label.data, &value)) {
        return absl::InvalidArgumentError(absl::StrCat(
            shard, ": offset ", label.header_offset, ": label member '", EscapeText(label.name),
            "' does not hold a non-negative integer that fits int32: '", EscapeText(label.data, 64),
            "'"));
      }
      RETURN_IF_ERROR(d->AddSample(s, shard, g.key, image, g.fields, scan.members));
      entries.push_back(DatasetIndex::Entry{absl::StrCat(shard_rel, "/", image.name), value});
      ++count;
    }
    d->shard_sizes_.push_back(count);
  }
  if (entries.empty()) {
    return absl::NotFoundError(absl::StrCat(
        shards.empty() ? std::string("no shards") : absl::StrCat(shards.front(), " ..."),
        ": no sample with an image member (jpg, jpeg, png, webp, ppm, pgm, bmp, tif, tiff) in ",
        shards.size(), " shard(s)"));
  }
  ASSIGN_OR_RETURN(d->index_, DatasetIndex::FromEntries(root, entries));
  return std::shared_ptr<const TarDataset>(std::move(d));
}

absl::Status TarDataset::AddSample(size_t shard_number, const std::string& shard,
                                   std::string_view key, const TarMember& image,
                                   const std::vector<int>& fields,
                                   const std::vector<TarMember>& members) {
  const uint32_t s = static_cast<uint32_t>(shard_number);
  if (parts_per_sample_ == 0) {
    locations_.push_back(Location{s, image.sparse, image.offset, image.size});
    return absl::OkStatus();
  }
  uint64_t begin = image.offset, end = image.offset + image.size;
  for (int m : fields) {
    if (m < 0) continue;
    const TarMember& member = members[m];
    if (member.sparse) {
      return absl::InvalidArgumentError(absl::StrCat(shard, ": offset ", member.header_offset,
                                                     ": field member '", EscapeText(member.name),
                                                     "' is a sparse file (not supported)"));
    }
    begin = std::min(begin, member.offset);
    end = std::max(end, member.offset + member.size);
  }
  if (end - begin > kAbsent - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        shard, ": sample '", EscapeText(key), "': its members span ", end - begin,
        " bytes of the shard (at most 4 GiB: a sample's members are stored together)"));
  }
  locations_.push_back(Location{s, image.sparse, begin, end - begin});
  parts_.push_back(
      Part{static_cast<uint32_t>(image.offset - begin), static_cast<uint32_t>(image.size)});
  for (int m : fields) {
    if (m < 0) {
      parts_.push_back(Part{kAbsent, 0});
    } else {
      parts_.push_back(Part{static_cast<uint32_t>(members[m].offset - begin),
                            static_cast<uint32_t>(members[m].size)});
    }
  }
  return absl::OkStatus();
}

std::optional<std::span<const uint8_t>> TarDataset::PartOf(uint64_t i, size_t p,
                                                           std::span<const uint8_t> read) const {
  if (read.size() != locations_[i].size) return std::nullopt;
  const Part& part = parts_[i * parts_per_sample_ + p];
  if (part.offset == kAbsent) return std::nullopt;
  return read.subspan(part.offset, part.size);
}

std::span<const uint8_t> TarDataset::Media(uint64_t index, std::span<const uint8_t> read) const {
  if (parts_per_sample_ == 0) return read;
  // A read of another size (not this dataset's span) is handed on whole:
  // the decoder then refuses it as the sample's error.
  return PartOf(index, 0, read).value_or(read);
}

std::optional<std::span<const uint8_t>> TarDataset::Member(uint64_t index, std::string_view member,
                                                           std::span<const uint8_t> read) const {
  for (size_t f = 0; f < field_members_.size(); ++f) {
    if (!member.empty() && field_members_[f] == member) return PartOf(index, f + 1, read);
  }
  return std::nullopt;
}

void TarDataset::Key(uint64_t index, std::string* out) const {
  // "SHARD/MEMBER" (the index's name), less "SHARD/" and the member's
  // extension: the key WebDataset groups by.
  std::string name = index_->relative_path(index);
  const size_t skip = shard_name_sizes_[locations_[index].shard] + 1;
  std::string_view member = std::string_view(name).substr(std::min(skip, name.size()));
  const size_t slash = member.rfind('/');
  const size_t dot = member.find('.', slash == std::string_view::npos ? 0 : slash + 1);
  out->assign(member.substr(0, dot));
}

}  // namespace conveyor
