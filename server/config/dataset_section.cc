// A pipeline's `dataset` map: an ImageFolder root, a list file, a URL list
// or tar shards (server/config/dataset_spec.h).
#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/data/brace_pattern.h"
#include "remote/url.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

// Bounds of the tar-shard fields.
constexpr size_t kMaxShards = 1000000;
constexpr uint64_t kMaxShuffleBuffer = 1 << 20;
constexpr size_t kMaxLabelKeyLength = 64;

const Section<DatasetSpec>& DatasetSection() {
  using schema::Manual;
  using schema::Path;
  using schema::String;
  using schema::Uint;
  static const Section<DatasetSpec> kSection({
      Path<DatasetSpec>("root", &DatasetSpec::root,
                        "an ImageFolder tree `root/<class>/<image>`, or the root of `list`")
          .InGroup("manual"),
      Path<DatasetSpec>("urls", &DatasetSpec::list,
                        "a list of remote samples, one `URL<TAB>label` per line")
          .InGroup("manual"),
      Path<DatasetSpec>("list", &DatasetSpec::list,
                        "a list file, one `relative/path<TAB>label` per line")
          .InGroup("manual"),
      Manual<DatasetSpec>("shards", "path, brace pattern, or a list of them", "none",
                          "WebDataset tar shards (paths or URLs), brace patterns expanded"),
      String<DatasetSpec>("label_key", &DatasetSpec::label_key,
                          "tar shards: the extension of the label member; `\"\"`: none (every "
                          "label 0)")
          .WithType("extension")
          .InGroup("tar")
          .WithCheck([](const DatasetSpec& d) {
            const bool ok = d.label_key.size() <= kMaxLabelKeyLength &&
                            std::all_of(d.label_key.begin(), d.label_key.end(), [](char ch) {
                              return absl::ascii_isalnum(static_cast<unsigned char>(ch)) ||
                                     ch == '_' || ch == '-' || ch == '.';
                            });
            return ok ? absl::OkStatus()
                      : absl::InvalidArgumentError(
                            "must be a member extension such as `cls` (letters, digits, '_', "
                            "'-', '.'), or \"\" for none");
          }),
      Uint<DatasetSpec>("shuffle_buffer", &DatasetSpec::shuffle_buffer, 0, kMaxShuffleBuffer,
                        "tar shards: the shuffle buffer of the shard-local order")
          .InGroup("tar"),
  });
  return kSection;
}

// dataset.shards: one path or brace pattern, or a list of them.
absl::Status ParseShards(const YamlFields& y, const std::string& field, const YAML::Node& n,
                         DatasetSpec* d) {
  std::vector<YAML::Node> items;
  if (n.IsSequence()) {
    for (const YAML::Node& item : n) items.push_back(item);
  } else {
    items.push_back(n);
  }
  if (items.empty()) return y.Error(field, n, "no shards listed");
  std::set<std::string> seen;
  for (const YAML::Node& item : items) {
    std::string pattern;
    RETURN_IF_ERROR(y.Scalar(item, field, "a path, a brace pattern or a list of them"));
    RETURN_IF_ERROR(y.ReadString(item, field, &pattern));
    if (pattern.empty()) return y.Error(field, item, "empty shard path");
    absl::StatusOr<std::vector<std::string>> expanded =
        ExpandBraces(pattern, kMaxShards - d->shards.size());
    if (!expanded.ok()) {  // (it may quote a URL: without its secrets)
      return y.Error(field, item, remote::RedactUrlsIn(std::string(expanded.status().message())));
    }
    for (const std::string& path : *expanded) {
      const bool remote = IsRemoteShard(path);
      if (!d->shards.empty() && remote != IsRemoteShard(d->shards.front())) {
        return y.Error(field, item,
                       "mixes local and remote shards: give all shards as paths or all as URLs");
      }
      std::string resolved = path;
      if (remote) {
        if (absl::StatusOr<remote::ObjectUrl> url = remote::ParseObjectUrl(path); !url.ok()) {
          return y.Error(field, item, std::string(url.status().message()));
        }
      } else {
        resolved = ResolvePath(y.base_dir(), path);
      }
      if (!seen.insert(resolved).second) {
        return y.Error(field, item,
                       absl::StrCat("shard '", EscapeText(remote::RedactUrl(resolved)),
                                    "' is listed twice (its samples would be read twice per "
                                    "epoch)"));
      }
      d->shards.push_back(std::move(resolved));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseDataset(const YamlFields& y, const std::string& field, const YAML::Node& n,
                          DatasetSpec* d) {
  const Section<DatasetSpec>& s = DatasetSection();
  RETURN_IF_ERROR(s.CheckKeys(y, n, field));
  if (n["shards"]) {
    if (n["root"] || n["list"] || n["urls"]) {
      return y.Error(field, n, "give `shards` or `root`/`list`/`urls`, not both");
    }
    d->kind = DatasetSpec::Kind::kTarShards;
    RETURN_IF_ERROR(ParseShards(y, field + ".shards", n["shards"], d));
    return s.ReadGroup(y, n, field, "tar", d);
  }
  RETURN_IF_ERROR(s.RefuseGroup(y, n, field, "tar", "only for tar shards (`shards`)"));
  if (n["urls"]) {
    if (n["list"] || n["root"]) {
      return y.Error(field + ".urls", n["urls"],
                     "a URL list stands alone: give `urls` without `root` or `list`");
    }
    d->kind = DatasetSpec::Kind::kUrlList;
    return s.ReadOne(y, n, field, "urls", d);
  }
  if (n["list"]) {
    d->kind = DatasetSpec::Kind::kListFile;
    RETURN_IF_ERROR(s.ReadOne(y, n, field, "list", d));
    return s.ReadOne(y, n, field, "root", d);
  }
  if (n["root"]) {
    d->kind = DatasetSpec::Kind::kImageFolder;
    return s.ReadOne(y, n, field, "root", d);
  }
  return y.Error(field, n,
                 "needs `root` (an ImageFolder tree), `list` (a list file, with optional "
                 "`root`), `urls` (a list of URL<TAB>label lines) or `shards` (tar shards)");
}

std::vector<FieldDoc> DatasetDocs() { return DatasetSection().Docs(); }

}  // namespace conveyor::server
