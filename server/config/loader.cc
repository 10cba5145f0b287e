#include "server/config/loader.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/base/mutex.h"
#include "core/base/posix_error.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/data/dataset_index.h"
#include "core/data/list_columns.h"
#include "core/data/local_range_reader.h"
#include "core/data/shard_order.h"
#include "core/data/tar_dataset.h"
#include "core/data/tar_shard_source.h"
#include "remote/cached_object_reader.h"
#include "remote/cached_output_store.h"
#include "remote/cached_shard_reader.h"
#include "remote/object_cache.h"
#include "remote/relaid_jpeg_source.h"
#include "remote/remote_reader.h"
#include "remote/url.h"
#include "remote/url_sample_source.h"
#include "server/config/yaml_fields.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace fs = std::filesystem;

namespace {

// `p` with the symlinks of its existing prefix resolved (the rest kept as
// written), normalised like ResolvePath; `p` itself when that fails.
std::string RealPath(const std::string& p) {
  std::error_code ec;
  const fs::path c = fs::weakly_canonical(fs::path(p), ec);
  if (ec) return p;
  return ResolvePath("/", c.string());
}

}  // namespace

absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path, const SystemInfo& system) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return PosixError(absl::StrCat(path, ": cannot read the config file"),
                      errno != 0 ? errno : EIO);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return PosixError(absl::StrCat(path, ": cannot read the config file"),
                      errno != 0 ? errno : EIO);
  }
  const fs::path abs = fs::absolute(fs::path(path));
  return ParseConfig(text.str(), path, abs.parent_path().string(), system);
}

absl::Status CheckAllowedRoots(const DaemonConfig& config) {
  if (config.allowed_roots.empty()) return absl::OkStatus();
  std::vector<std::string> roots;
  for (const std::string& r : config.allowed_roots) roots.push_back(RealPath(r));
  for (const PipelineSpec& spec : config.pipelines) {
    for (const DatasetPath& dp : DatasetPaths(spec)) {
      const std::string real = RealPath(dp.path);
      bool ok = false;
      for (const std::string& root : roots) ok |= PathIsUnder(real, root);
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", dp.field, ": ",
                         OutsideAllowedRoots(dp.path, real, config.allowed_roots)));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// One dataset as loaded, shared by the pipelines that name it.
struct LoadedDataset {
  std::shared_ptr<const DatasetIndex> index;            // what the sources read
  std::shared_ptr<const DatasetIndex> display;          // what samples are named by (DisplayIndex)
  std::shared_ptr<const TarDataset> tar;                // tar shards only
  std::shared_ptr<const EpochOrder> order;              // tar shards only
  std::shared_ptr<const ByteRangeReader> shard_reader;  // tar shards only: local or remote
  std::shared_ptr<const ListColumns> columns;           // list and URL files read by fields
};

// The config's one remote reader (one I/O thread), made on first use.
using RemoteReaderGetter = std::function<absl::StatusOr<std::shared_ptr<const ByteRangeReader>>()>;

absl::StatusOr<LoadedDataset> LoadDataset(const DatasetSpec& d, MediaKind media,
                                          const RemoteReaderGetter& get_reader,
                                          const std::vector<std::string>& allowed_real_roots) {
  LoadedDataset loaded;
  if (d.kind == DatasetSpec::Kind::kTarShards) {
    // ParseShards guarantees that the shards are all local or all remote.
    if (IsRemoteShard(d.shards.front())) {
      ASSIGN_OR_RETURN(loaded.shard_reader, get_reader());
    } else {
      // Each shard opened once, here, and read through its fd from then on;
      // the files opened are judged against allowed_roots again.
      ASSIGN_OR_RETURN(loaded.shard_reader,
                       LocalRangeReader::Open(d.shards, 0, allowed_real_roots));
    }
    TarDatasetOptions options;
    options.label_key = d.label_key;
    options.field_members = d.field_members;
    ASSIGN_OR_RETURN(loaded.tar, TarDataset::Load(d.shards, *loaded.shard_reader, options));
    loaded.index = loaded.tar->index();
    loaded.order = std::make_shared<ShardOrder>(loaded.tar->shard_sizes(), d.shuffle_buffer);
    return loaded;
  }
  if (d.kind == DatasetSpec::Kind::kImageFolder) {
    ASSIGN_OR_RETURN(loaded.index, DatasetIndex::LoadImageFolder(d.root, ExtensionsFor(media)));
    return loaded;
  }
  // A list of files or URLs; with fields, the columns they read are kept.
  std::vector<uint32_t> wanted;
  for (const std::string& member : d.field_members) {
    if (std::optional<uint32_t> c = ColumnOfMember(member); c.has_value()) wanted.push_back(*c);
  }
  std::shared_ptr<ListColumns> columns;
  if (!wanted.empty()) columns = std::make_shared<ListColumns>(std::move(wanted));
  ASSIGN_OR_RETURN(loaded.index, DatasetIndex::LoadListFile(d.list, d.root, columns.get()));
  loaded.columns = std::move(columns);
  return loaded;
}

// Whether the dataset's samples are read over the network (its names are
// URLs, or tar shards behind URLs).
bool IsRemoteDataset(const DatasetSpec& d) {
  return d.kind == DatasetSpec::Kind::kUrlList ||
         (d.kind == DatasetSpec::Kind::kTarShards && IsRemoteShard(d.shards.front()));
}

// The index the engine names samples by (Batch failures, statuses, log
// lines). A dataset of URLs may carry secrets in them (`user:pass@`,
// presigned query strings): then a copy whose names are the URLs without
// them (remote::StripUrlSecrets), and the source keeps reading the real
// ones; else the loaded index itself (no second copy).
absl::StatusOr<std::shared_ptr<const DatasetIndex>> DisplayIndex(const DatasetSpec& d,
                                                                 const LoadedDataset& loaded) {
  const std::shared_ptr<const DatasetIndex>& index = loaded.index;
  std::vector<DatasetIndex::Entry> entries;
  if (d.kind == DatasetSpec::Kind::kUrlList) {
    bool secrets = false;
    for (size_t i = 0; i < index->size() && !secrets; ++i) {
      const std::string url = index->relative_path(i);
      secrets = remote::StripUrlSecrets(url) != url;
    }
    if (!secrets) return index;
    entries.reserve(index->size());
    for (size_t i = 0; i < index->size(); ++i) {
      entries.push_back({remote::StripUrlSecrets(index->relative_path(i)), index->label(i)});
    }
  } else if (loaded.tar != nullptr && IsRemoteDataset(d)) {
    // A tar sample is named "SHARD/MEMBER", SHARD relative to the common
    // folder of the shards: the whole shard URL without its secrets then.
    const std::vector<std::string>& shards = loaded.tar->shards();
    bool secrets = false;
    for (const std::string& shard : shards) secrets |= remote::StripUrlSecrets(shard) != shard;
    if (!secrets) return index;
    const std::string& root = index->root();
    entries.reserve(index->size());
    for (size_t i = 0; i < index->size(); ++i) {
      const std::string& shard = shards[loaded.tar->location(i).shard];
      const std::string rel = index->relative_path(i);
      const size_t cut = root == "/" ? 1 : root.size() + 1;
      const std::string shard_rel = shard.size() > cut ? shard.substr(cut) : shard;
      std::string name =
          rel.compare(0, shard_rel.size() + 1, shard_rel + "/") == 0
              ? absl::StrCat(remote::StripUrlSecrets(shard), "/", rel.substr(shard_rel.size() + 1))
              : remote::RedactUrlsIn(rel);
      entries.push_back({std::move(name), index->label(i)});
    }
  } else {
    return index;
  }
  return DatasetIndex::FromEntries(index->root(), entries, index->class_names());
}

const char* DatasetField(const DatasetSpec& d) {
  switch (d.kind) {
    case DatasetSpec::Kind::kImageFolder: return ".root";
    case DatasetSpec::Kind::kListFile: return ".list";
    case DatasetSpec::Kind::kTarShards: return ".shards";
    case DatasetSpec::Kind::kUrlList: return ".urls";
  }
  return "";
}

std::string DatasetName(const DatasetSpec& d) {
  switch (d.kind) {
    case DatasetSpec::Kind::kImageFolder: return d.root;
    case DatasetSpec::Kind::kListFile:
    case DatasetSpec::Kind::kUrlList: return d.list;
    case DatasetSpec::Kind::kTarShards: {
      // (URLs without their secrets.)
      const std::string first = remote::RedactUrlsIn(d.shards.front());
      return d.shards.size() == 1 ? first
                                  : absl::StrCat(first, " (+", d.shards.size() - 1, " shards)");
    }
  }
  return "";
}

}  // namespace

namespace {

// Remote tar shards larger than this are not cached (a shard is held in
// memory while it is fetched whole: config/README.md, "Memory: the worst case").
constexpr uint64_t kMaxCachedShardBytes = uint64_t{1} << 30;

// The daemon's object cache of `options` (null when off): one per folder for
// the whole process, so a reload that keeps the folder keeps the cache (and
// two caches never scan each other's files). Changed settings of a folder
// already open apply at the next start.
absl::StatusOr<std::shared_ptr<remote::ObjectCache>> SharedObjectCache(
    const remote::CacheOptions& options) {
  if (options.dir.empty()) return nullptr;
  static Mutex mu;
  static auto* open = new std::map<std::string, std::weak_ptr<remote::ObjectCache>>();
  MutexLock lock(&mu);
  std::weak_ptr<remote::ObjectCache>& slot = (*open)[options.dir];
  if (std::shared_ptr<remote::ObjectCache> c = slot.lock()) {
    if (c->options().max_bytes != options.max_bytes || c->options().eviction != options.eviction ||
        c->options().fsync != options.fsync) {
      spdlog::warn("cache {}: changed settings apply when the daemon restarts", options.dir);
    }
    return c;
  }
  absl::StatusOr<std::shared_ptr<remote::ObjectCache>> c = remote::ObjectCache::Open(options);
  if (absl::IsFailedPrecondition(c.status())) {
    // Another daemon's folder (or --check-config beside the running
    // daemon): this one reads without a cache rather than not at all.
    spdlog::warn("{}; reading remote objects without a cache", std::string(c.status().message()));
    return nullptr;
  }
  if (!c.ok()) return c.status();
  slot = *c;
  return c;
}

}  // namespace

std::string DatasetLoadKey(const PipelineSpec& spec) {
  const DatasetSpec& d = spec.dataset;
  return d.kind == DatasetSpec::Kind::kImageFolder
             ? absl::StrCat(d.Key(), "\nkind:", ToString(spec.config.transform.kind))
             : d.Key();
}

absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> LoadPipelines(
    const DaemonConfig& config, const std::vector<std::shared_ptr<const PipelineConfig>>& running) {
  RETURN_IF_ERROR(CheckAllowedRoots(config));
  std::vector<std::string> allowed_real_roots;  // as CheckAllowedRoots resolves them
  for (const std::string& r : config.allowed_roots) allowed_real_roots.push_back(RealPath(r));
  std::map<std::string, LoadedDataset> loaded;
  std::vector<std::shared_ptr<const PipelineConfig>> out;
  // One reader (one I/O thread) for every URL dataset and remote shard of this config.
  std::shared_ptr<const remote::RemoteReader> reader;
  RemoteReaderGetter get_reader = [&]() -> absl::StatusOr<std::shared_ptr<const ByteRangeReader>> {
    if (reader == nullptr) {
      absl::StatusOr<std::shared_ptr<remote::RemoteReader>> r =
          remote::MakeRemoteRangeReader(config.remote);
      if (!r.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("remote: ", r.status().message()));
      }
      reader = *std::move(r);
    }
    return std::shared_ptr<const ByteRangeReader>(reader);
  };
  // The cache's reader over `reader`, shared by every cached URL pipeline
  // (one GET for their concurrent misses); made when a pipeline uses it.
  std::shared_ptr<const remote::CachedObjectReader> cached;
  // The same for remote tar shards (whole shards).
  std::shared_ptr<const remote::CachedShardReader> cached_shards;
  // Re-laid JPEG copies (relay_jpeg), kept in the same cache; one relayer
  // thread for every pipeline of this config that asks for them.
  std::shared_ptr<remote::ObjectCache> relay_cache;
  std::shared_ptr<remote::Relayer> relayer;
  for (const PipelineSpec& spec : config.pipelines) {
    const std::string field = absl::StrCat("pipelines.", spec.config.name, ".dataset");
    const DatasetSpec& d = spec.dataset;
    // A folder lists the files of its pipeline's kind (core/data/media_extensions.h).
    const MediaKind media = spec.config.transform.kind;
    const std::string key = DatasetLoadKey(spec);
    auto it = loaded.find(key);
    if (it == loaded.end()) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<LoadedDataset> dataset = LoadDataset(d, media, get_reader, allowed_real_roots);
      if (dataset.ok()) {
        absl::StatusOr<std::shared_ptr<const DatasetIndex>> display = DisplayIndex(d, *dataset);
        if (display.ok()) {
          dataset->display = *std::move(display);
        } else {
          dataset = display.status();
        }
      }
      if (!dataset.ok()) {
        // A URL dataset's messages may quote its URLs (a bad line, a shard's
        // error): without their secrets.
        const std::string why = IsRemoteDataset(d)
                                    ? remote::RedactUrlsIn(std::string(dataset.status().message()))
                                    : std::string(dataset.status().message());
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", field, DatasetField(d), ": ", why));
      }
      const std::shared_ptr<const DatasetIndex>& index = dataset->index;
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      spdlog::info("dataset {}: {} samples, {} classes, index {:.1f} MiB, loaded in {:.0f} ms",
                   DatasetName(d), index->size(), index->num_classes(),
                   index->MemoryBytes() / 1048576.0, ms);
      // What the index left out, once per dataset (names escaped, capped).
      if (const std::string ignored = index->ignored().Summary(); !ignored.empty()) {
        spdlog::warn("dataset {}: {}", EscapeText(d.root), ignored);
      }
      if (dataset->tar != nullptr && dataset->tar->ignored() > 0) {
        spdlog::warn(
            "dataset {}: {} tar entries belong to no sample with an image (no key, "
            "no image member, or not a regular file)",
            DatasetName(d), dataset->tar->ignored());
      }
      if (dataset->tar != nullptr) {
        for (const std::string& w : dataset->tar->warnings()) {
          spdlog::warn("dataset {}: {}", DatasetName(d), w);
        }
      }
      it = loaded.emplace(key, *std::move(dataset)).first;
    }
    auto pc = std::make_shared<PipelineConfig>(spec.config);
    pc->dataset = it->second.display;
    if (it->second.tar != nullptr) {
      std::shared_ptr<const ByteRangeReader> shard_reader = it->second.shard_reader;
      // Remote shards (read by `reader`) of a cached pipeline: through the cache.
      if (spec.cache && reader != nullptr && shard_reader.get() == reader.get() &&
          !config.cache.dir.empty()) {
        if (cached_shards == nullptr) {
          absl::StatusOr<std::shared_ptr<remote::ObjectCache>> c = SharedObjectCache(config.cache);
          if (!c.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(config.source, ": field cache: ", c.status().message()));
          }
          if (*c != nullptr) {
            cached_shards = std::make_shared<const remote::CachedShardReader>(
                reader, *std::move(c), std::min(config.cache.max_bytes, kMaxCachedShardBytes));
          }
        }
        if (cached_shards != nullptr) shard_reader = cached_shards;
      }
      pc->source = std::make_shared<TarShardSource>(it->second.tar, std::move(shard_reader),
                                                    spec.config.max_file_bytes);
      pc->order = it->second.order;
    }
    if (d.kind == DatasetSpec::Kind::kUrlList) {
      if (absl::Status st = get_reader().status(); !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(config.source, ": field ", st.message()));
      }
      if (spec.cache && cached == nullptr && !config.cache.dir.empty()) {
        absl::StatusOr<std::shared_ptr<remote::ObjectCache>> c = SharedObjectCache(config.cache);
        if (!c.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(config.source, ": field cache: ", c.status().message()));
        }
        if (*c != nullptr) {
          cached = std::make_shared<const remote::CachedObjectReader>(reader, *std::move(c));
        }
      }
      absl::StatusOr<std::shared_ptr<const remote::UrlSampleSource>> source =
          remote::UrlSampleSource::Create(it->second.index, reader, pc->max_file_bytes,
                                          spec.cache ? cached : nullptr);
      if (!source.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", field,
                         ".urls: ", remote::RedactUrlsIn(std::string(source.status().message()))));
      }
      pc->source = *std::move(source);
    }
    if (!pc->fields.empty()) {
      if (it->second.tar != nullptr) {
        pc->parts = it->second.tar;
      } else if (d.kind == DatasetSpec::Kind::kImageFolder) {
        pc->parts = std::make_shared<WholeFileParts>(pc->dataset);
      } else {
        pc->parts = std::make_shared<ListFileParts>(pc->dataset, it->second.columns);
      }
    }
    if (spec.relay_jpeg) {
      const std::string relay_field = absl::StrCat("pipelines.", spec.config.name, ".relay_jpeg");
      if (config.cache.dir.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", relay_field,
                         ": needs the daemon's `cache` (a folder on local disk for the copies)"));
      }
      if (d.kind == DatasetSpec::Kind::kUrlList ||
          spec.config.transform.kind != MediaKind::kImage) {
        return absl::InvalidArgumentError(absl::StrCat(
            config.source, ": field ", relay_field,
            ": is for image pipelines of local files or tar shards (URL samples have no "
            "identity to key their copies by)"));
      }
      if (relayer == nullptr) {
        absl::StatusOr<std::shared_ptr<remote::ObjectCache>> c = SharedObjectCache(config.cache);
        if (!c.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(config.source, ": field cache: ", c.status().message()));
        }
        relay_cache = *std::move(c);
        if (relay_cache != nullptr) relayer = std::make_shared<remote::Relayer>(relay_cache);
      }
      if (relayer != nullptr) {  // (null: the folder is another daemon's; read as they are)
        std::shared_ptr<const SampleSource> inner = pc->source;
        if (inner == nullptr) {
          inner = std::make_shared<FileSampleSource>(pc->dataset, pc->max_file_bytes);
        }
        pc->source = std::make_shared<remote::RelaidJpegSource>(std::move(inner), relay_cache,
                                                                relayer, pc->dataset->size());
      }
    }
    if (pc->cache_output) {
      for (const std::shared_ptr<const PipelineConfig>& r : running) {
        if (r->name == pc->name && r->output_cache != nullptr &&
            r->output_cache->capacity_bytes() == pc->cache_output_bytes) {
          pc->output_cache = r->output_cache;
        }
      }
      if (pc->output_cache == nullptr) {
        // With the daemon's cache (and the pipeline not opted out): on disk
        // too, in the node cache, shared by every pipeline and kept across
        // restarts (remote/cached_output_store.h).
        std::shared_ptr<OutputStore> store;
        if (spec.cache && !config.cache.dir.empty()) {
          absl::StatusOr<std::shared_ptr<remote::ObjectCache>> c = SharedObjectCache(config.cache);
          if (!c.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(config.source, ": field cache: ", c.status().message()));
          }
          if (*c != nullptr) store = std::make_shared<remote::CachedOutputStore>(*std::move(c));
        }
        pc->output_cache = std::make_shared<OutputCache>(pc->cache_output_bytes, std::move(store));
      }
    }
    if (absl::Status st = ValidatePipelineConfig(*pc); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.source, ": field pipelines.", spec.config.name, ": ", st.message()));
    }
    out.push_back(std::move(pc));
  }
  return out;
}

}  // namespace conveyor::server
