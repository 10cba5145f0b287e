// The parsers of the config's sections, one file each
// (server/config/*_section.cc), each on top of its Section table
// (server/config/schema.h), and the tables' rows for the docs. Internal to
// server/config/: ParseConfig (config.h) is the entry point.
//
// Every parser reports the first problem as "FILE: field PATH: reason
// (line N)" through the YamlFields it is given.
//
// Thread-safety: free functions; the tables they use are immutable statics.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/config/config.h"
#include "server/config/schema.h"
#include "server/config/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

// `listen` (listen_section.cc).
absl::Status ParseListen(const YamlFields& y, const YAML::Node& n, ListenConfig* out);
std::vector<FieldDoc> ListenDocs();

// `access`; tokens name pipelines of `c`, so this runs after the pipelines
// (access_section.cc).
absl::Status ParseAccess(const YamlFields& y, const YAML::Node& n, const DaemonConfig& c,
                         AccessConfig* out);
std::vector<FieldDoc> AccessDocs();

// `engine` (engine_section.cc).
// `usable_cpus`: SystemInfo::usable_cpus (cpu_budget's bound and its "N%").
absl::Status ParseEngine(const YamlFields& y, const YAML::Node& n, double usable_cpus,
                         EngineOptions* out);
std::vector<FieldDoc> EngineDocs();

// `remote` (remote_section.cc).
absl::Status ParseRemote(const YamlFields& y, const YAML::Node& n, remote::RemoteOptions* out);
std::vector<FieldDoc> RemoteDocs();

// `cache` (cache_section.cc).
absl::Status ParseCache(const YamlFields& y, const YAML::Node& n, remote::CacheOptions* out);
std::vector<FieldDoc> CacheDocs();

// `pipelines.<name>.dataset` (dataset_section.cc).
absl::Status ParseDataset(const YamlFields& y, const std::string& field, const YAML::Node& n,
                          DatasetSpec* out);
std::vector<FieldDoc> DatasetDocs();

// The video fields of a pipeline: keys of the pipeline's own map, refused
// unless `kind: video`, then read with their cross-checks (media_section.cc).
const Section<PipelineSpec>& VideoSection();
absl::Status ParseVideo(const YamlFields& y, const std::string& field, const YAML::Node& n,
                        PipelineSpec* out);

// A pipeline's `audio` map, for kind audio (media_section.cc).
absl::Status ParseAudio(const YamlFields& y, const std::string& field, const YAML::Node& n,
                        TransformSpec* t);
std::vector<FieldDoc> AudioDocs();

// A pipeline's `augment`: `train`, `eval` or a list of ops
// (augment_section.cc).
absl::Status ReadAugment(const YamlFields& y, const YAML::Node& n, const std::string& field,
                         PipelineSpec* out);

// A pipeline's `fields` list (fields_section.cc): read after its dataset;
// also sets the dataset's field members.
absl::Status ParseFields(const YamlFields& y, const std::string& field, const YAML::Node& n,
                         PipelineSpec* out);
std::vector<FieldDoc> FieldsDocs();

// One `pipelines.<name>` entry (pipeline_section.cc).
absl::Status ParsePipeline(const YamlFields& y, const std::string& name, const YAML::Node& n,
                           const DaemonConfig& c, PipelineSpec* out);
std::vector<FieldDoc> PipelineDocs();

// The whole document (config.cc).
absl::Status ParseDaemon(const YamlFields& y, const YAML::Node& root, DaemonConfig* out);
std::vector<FieldDoc> DaemonDocs();

}  // namespace conveyor::server
