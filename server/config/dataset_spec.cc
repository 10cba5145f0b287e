#include "server/config/dataset_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace conveyor::server {

std::string DatasetSpec::Key() const {
  switch (kind) {
    case Kind::kImageFolder: return absl::StrCat("folder:", root);
    case Kind::kListFile:
      return absl::StrCat("list:", list, "\n", root, "\n", absl::StrJoin(field_members, ","));
    case Kind::kUrlList:
      return absl::StrCat("urls:", list, "\n", absl::StrJoin(field_members, ","));
    case Kind::kTarShards:
      return absl::StrCat("tar:", label_key, "\n", shuffle_buffer, "\n",
                          absl::StrJoin(field_members, ","), "\n", absl::StrJoin(shards, "\n"));
  }
  return "";
}

bool IsRemoteShard(const std::string& shard) {
  for (const char* scheme : {"http://", "https://", "s3://"}) {
    if (absl::StartsWithIgnoreCase(shard, scheme)) return true;
  }
  return false;
}

std::vector<DatasetPath> DatasetPaths(const PipelineSpec& spec) {
  const std::string f = absl::StrCat("pipelines.", spec.config.name, ".dataset");
  const DatasetSpec& d = spec.dataset;
  if (d.kind == DatasetSpec::Kind::kImageFolder) return {{f + ".root", d.root}};
  if (d.kind == DatasetSpec::Kind::kTarShards) {
    std::vector<DatasetPath> paths;
    for (const std::string& shard : d.shards) {
      if (!IsRemoteShard(shard)) paths.push_back({f + ".shards", shard});  // URLs: no path
    }
    return paths;
  }
  if (d.kind == DatasetSpec::Kind::kUrlList) return {{f + ".urls", d.list}};
  if (!d.root.empty()) return {{f + ".list", d.list}, {f + ".root", d.root}};
  std::string folder = d.list.substr(0, d.list.rfind('/'));
  if (folder.empty()) folder = "/";
  return {{f + ".list", d.list}, {f + ".list", folder}};
}

std::string OutsideAllowedRoots(const std::string& path, const std::string& real,
                                const std::vector<std::string>& allowed_roots) {
  return absl::StrCat("'", path, "'", real != path ? absl::StrCat(" (really '", real, "')") : "",
                      " lies outside the allowed roots [", absl::StrJoin(allowed_roots, ", "), "]");
}

bool PathIsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return absl::StartsWith(path, "/");
  if (!absl::StartsWith(path, root)) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

}  // namespace conveyor::server
