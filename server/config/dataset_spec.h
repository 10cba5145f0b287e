// DatasetSpec and PipelineSpec: what one `pipelines.<name>` entry of the
// config says, before its dataset is loaded — where the samples come from
// (a folder, a list file, a URL list or tar shards) and the engine's
// PipelineConfig. Also the paths a dataset reads and the rule that keeps them
// under allowed_roots, shared by the parse (as written) and the loader
// (symlinks resolved, server/config/loader.h).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/pipeline_config.h"

namespace conveyor::server {

// Where a pipeline's samples come from. Paths are absolute and lexically
// normal (symlinks are resolved only when the dataset loads).
struct DatasetSpec {
  // kTarShards: `shards` (core/data/tar_dataset.h). kUrlList: `list` holds one
  // `URL<TAB>label` per line (dataset.urls), samples read over HTTP(S)/S3
  // (remote/url_sample_source.h).
  enum class Kind { kImageFolder, kListFile, kTarShards, kUrlList };
  Kind kind = Kind::kImageFolder;
  std::string root;  // ImageFolder root, or the list's root ("" = the list's directory)
  std::string list;  // list file (kListFile, kUrlList)
  // kTarShards only: the shards, brace patterns expanded, in order; the label
  // member's extension; the shuffle buffer B of the shard-local order
  // (core/data/shard_order.h).
  std::vector<std::string> shards;
  std::string label_key = "cls";  // "": no label members (every label 0)
  uint64_t shuffle_buffer = 1000;
  // The members the pipeline's fields read (TarDatasetOptions::field_members),
  // set from `fields` (fields_section.cc).
  std::vector<std::string> field_members;

  // Pipelines whose datasets have equal keys share one loaded index.
  std::string Key() const;
};

// One `pipelines.<name>` entry. `config.dataset` stays null until
// LoadPipelines() (server/config/loader.h) loads the dataset.
struct PipelineSpec {
  DatasetSpec dataset;
  PipelineConfig config;  // config.name is the pipeline's name
  // `cache: false`: this pipeline's remote objects bypass the daemon's cache.
  bool cache = true;
  // `relay_jpeg: true`: its JPEGs are served from re-laid copies kept in the
  // daemon's cache (remote/relaid_jpeg_source.h).
  bool relay_jpeg = false;
  // `augment` was a list of ops (augment_section.cc), and it had a normalize.
  bool augment_ops = false;
  bool augment_normalizes = false;
};

// A path a pipeline reads from, with the config field that names it.
struct DatasetPath {
  std::string field;  // "pipelines.NAME.dataset.root", "...dataset.list" or "...dataset.shards"
  std::string path;   // absolute, lexically normal
};

// Whether a tar shard is a URL (http://, https://, s3://, any case) read by
// the remote reader rather than a local path.
bool IsRemoteShard(const std::string& shard);

// The paths `spec` reads: its ImageFolder root; or its list file and the
// samples' root (the list's folder, named by dataset.list, when no root is
// given).
std::vector<DatasetPath> DatasetPaths(const PipelineSpec& spec);

// The message for `path` (really `real` once symlinks are resolved; equal
// when not resolved) lying outside every one of `allowed_roots`:
// "'PATH' (really 'REAL') lies outside the allowed roots [A, B]".
std::string OutsideAllowedRoots(const std::string& path, const std::string& real,
                                const std::vector<std::string>& allowed_roots);

// Whether `path` is `root` or lies below it (both absolute and normalised).
bool PathIsUnder(const std::string& path, const std::string& root);

}  // namespace conveyor::server
