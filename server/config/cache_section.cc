// The `cache` section: the node-local cache of remote objects
// (remote/object_cache.h).
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "server/config/sections.h"

namespace conveyor::server {

namespace {

using remote::CacheEvictionKind;
using remote::CacheOptions;

constexpr uint64_t kMinCacheBytes = uint64_t{1} << 20;

const Section<CacheOptions>& CacheSection() {
  using schema::Bool;
  using schema::Enum;
  using schema::Size;
  using schema::String;
  static const Section<CacheOptions> kSection({
      String<CacheOptions>("dir", &CacheOptions::dir,
                           "the folder on local disk that holds the cache (made if missing; "
                           "one daemon per folder)")
          .WithType("absolute path")
          .WithDefault("none (no cache)")
          .WithCheck([](const CacheOptions& c) {
            if (!c.dir.empty() && c.dir.front() == '/') return absl::OkStatus();
            return absl::InvalidArgumentError(
                absl::StrCat("expected an absolute path, got '", EscapeText(c.dir), "'"));
          }),
      Size<CacheOptions>("max_bytes", &CacheOptions::max_bytes, kMinCacheBytes,
                         "disk bytes the cache's entries may take")
          .WithDefault("required with `dir`"),
      Enum<CacheOptions>(
          "eviction", &CacheOptions::eviction,
          std::vector<std::pair<std::string, CacheEvictionKind>>{
              {"fixed", CacheEvictionKind::kFixedSubset}, {"lru", CacheEvictionKind::kLru}},
          "which objects stay when the budget is full: `fixed` keeps what is in "
          "and admits while there is room (best for epochs), `lru` evicts the "
          "least recently used"),
      Bool<CacheOptions>("fsync", &CacheOptions::fsync,
                         "fsync each entry (and the folder) before it is served"),
  });
  return kSection;
}

}  // namespace

absl::Status ParseCache(const YamlFields& y, const YAML::Node& n, CacheOptions* c) {
  RETURN_IF_ERROR(CacheSection().Read(y, n, "cache", c));
  if (c->dir.empty()) return y.Error("cache.dir", n, "required in a `cache` section");
  if (c->max_bytes == 0) return y.Error("cache.max_bytes", n, "required in a `cache` section");
  return absl::OkStatus();
}

std::vector<FieldDoc> CacheDocs() { return CacheSection().Docs(); }

}  // namespace conveyor::server
