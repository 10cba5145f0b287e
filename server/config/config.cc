#include "server/config/config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/data/brace_pattern.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "remote/url.h"
#include "server/config/field_checks.h"
#include "server/config/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// conveyord's schema: one pass over the YAML tree, on top of YamlFields'
// typed reads. Every Parse* reports the first problem as
// "FILE: field PATH: reason (line N)".
class Schema : public YamlFields {
 public:
  using YamlFields::YamlFields;

  absl::Status ParseTop(const YAML::Node& root, DaemonConfig* c) const;
  absl::Status ParseListen(const YAML::Node& n, ListenConfig* l) const;
  absl::Status ParseTls(const YAML::Node& n, TlsConfig* t) const;
  absl::Status ParseAccess(const YAML::Node& n, const DaemonConfig& c, AccessConfig* a) const;
  absl::Status ParseToken(const std::string& field, const YAML::Node& n, const DaemonConfig& c,
                          TokenSpec* t) const;
  // A list of user or group names or numbers (resolved at start, not here).
  absl::Status ParseIdList(const YAML::Node& n, const std::string& field,
                           std::vector<std::string>* out) const;
  absl::Status ParseEngine(const YAML::Node& n, EngineOptions* e) const;
  absl::Status ParsePipeline(const std::string& name, const YAML::Node& n, const DaemonConfig& c,
                             PipelineSpec* p) const;
  absl::Status ParseDataset(const std::string& field, const YAML::Node& n, DatasetSpec* d) const;
  // dataset.shards: one path or brace pattern, or a list of them.
  absl::Status ParseShards(const std::string& field, const YAML::Node& n, DatasetSpec* d) const;
  absl::Status ParseRemote(const YAML::Node& n, remote::RemoteOptions* r) const;
  absl::Status ParseVideoFields(const std::string& f, const YAML::Node& n, TransformSpec* t) const;
  absl::Status ParseAudio(const std::string& field, const YAML::Node& n, TransformSpec* t) const;
};

// Bounds of the tar-shard fields.
constexpr size_t kMaxShards = 1000000;
constexpr uint64_t kMaxShuffleBuffer = 1 << 20;

absl::Status Schema::ParseIdList(const YAML::Node& n, const std::string& field,
                                 std::vector<std::string>* out) const {
  if (!n) return absl::OkStatus();
  if (!n.IsSequence()) {
    return Error(field, n,
                 absl::StrCat("expected a list of names or numbers, got ", DescribeNode(n)));
  }
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string item = absl::StrCat(field, "[", i, "]");
    std::string v;
    RETURN_IF_ERROR(ReadString(n[i], item, &v));
    const bool printable = std::all_of(v.begin(), v.end(), [](char ch) {
      return ch > ' ' && ch < 0x7f && ch != ':';
    });
    if (v.empty() || v.size() > 256 || !printable) {
      return Error(item, n[i], "expected a user or group name or number");
    }
    out->push_back(v);
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseListen(const YAML::Node& n, ListenConfig* l) const {
  RETURN_IF_ERROR(CheckMap(n, "listen",
                           {"unix", "unix_mode", "tcp", "data_tcp", "tls", "allow_insecure_tcp",
                            "allowed_uids", "allowed_gids", "operator_uids", "operator_gids"}));
  RETURN_IF_ERROR(ParseIdList(n["allowed_uids"], "listen.allowed_uids", &l->allowed_uids));
  RETURN_IF_ERROR(ParseIdList(n["allowed_gids"], "listen.allowed_gids", &l->allowed_gids));
  RETURN_IF_ERROR(ParseIdList(n["operator_uids"], "listen.operator_uids", &l->operator_uids));
  RETURN_IF_ERROR(ParseIdList(n["operator_gids"], "listen.operator_gids", &l->operator_gids));
  if (n["unix"]) {
    std::string s;
    RETURN_IF_ERROR(ReadString(n["unix"], "listen.unix", &s));
    l->unix_path = s.empty() ? "" : ResolvePath(base_dir(), s);
    if (!l->unix_path.empty()) {
      if (absl::Status st = ValidateUnixPath(l->unix_path); !st.ok()) {
        return Error("listen.unix", n["unix"], std::string(st.message()));
      }
    }
  }
  if (n["unix_mode"]) {
    RETURN_IF_ERROR(Scalar(n["unix_mode"], "listen.unix_mode", "an octal mode"));
    if (absl::Status st = ParseUnixMode(n["unix_mode"].Scalar(), &l->unix_mode); !st.ok()) {
      return Error("listen.unix_mode", n["unix_mode"], std::string(st.message()));
    }
  }
  if (n["tcp"]) {
    RETURN_IF_ERROR(ReadString(n["tcp"], "listen.tcp", &l->tcp));
    if (!l->tcp.empty()) {
      if (absl::Status st = ValidateTcpAddress(l->tcp); !st.ok()) {
        return Error("listen.tcp", n["tcp"], std::string(st.message()));
      }
    }
  }
  if (n["data_tcp"]) {
    RETURN_IF_ERROR(ReadString(n["data_tcp"], "listen.data_tcp", &l->data_tcp));
    if (!l->data_tcp.empty() && l->data_tcp != "none") {
      if (absl::Status st = ValidateTcpAddress(l->data_tcp); !st.ok()) {
        return Error("listen.data_tcp", n["data_tcp"], std::string(st.message()));
      }
    }
  }
  if (n["tls"]) RETURN_IF_ERROR(ParseTls(n["tls"], &l->tls));
  if (n["allow_insecure_tcp"]) {
    RETURN_IF_ERROR(
        ReadBool(n["allow_insecure_tcp"], "listen.allow_insecure_tcp", &l->allow_insecure_tcp));
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseTls(const YAML::Node& n, TlsConfig* t) const {
  RETURN_IF_ERROR(CheckMap(n, "listen.tls", {"cert", "key", "client_ca", "require_client_cert",
                                             "reload_interval_seconds"}));
  if (!n["cert"] || !n["key"]) {
    return Error("listen.tls", n, "needs both `cert` and `key` (PEM files of the server)");
  }
  RETURN_IF_ERROR(ReadPath(n["cert"], "listen.tls.cert", &t->cert));
  RETURN_IF_ERROR(ReadPath(n["key"], "listen.tls.key", &t->key));
  if (n["client_ca"]) RETURN_IF_ERROR(ReadPath(n["client_ca"], "listen.tls.client_ca", &t->client_ca));
  if (n["require_client_cert"]) {
    RETURN_IF_ERROR(ReadBool(n["require_client_cert"], "listen.tls.require_client_cert",
                             &t->require_client_cert));
    if (t->require_client_cert && t->client_ca.empty()) {
      return Error("listen.tls.require_client_cert", n["require_client_cert"],
                   "needs listen.tls.client_ca (the CAs client certificates are checked against)");
    }
  }
  if (n["reload_interval_seconds"]) {
    RETURN_IF_ERROR(ReadUintAs(n["reload_interval_seconds"], "listen.tls.reload_interval_seconds",
                               1, 86400, &t->reload_interval_seconds));
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseToken(const std::string& field, const YAML::Node& n,
                                const DaemonConfig& c, TokenSpec* t) const {
  RETURN_IF_ERROR(CheckMap(n, field, {"name", "file", "pipelines", "operator"}));
  if (!n["name"]) return Error(field, n, "missing `name` (what its holder is known as)");
  if (!n["file"]) return Error(field, n, "missing `file` (the file holding the token)");
  RETURN_IF_ERROR(ReadString(n["name"], field + ".name", &t->name));
  if (!ValidPipelineName(t->name)) {
    return Error(field + ".name", n["name"],
                 "a token name is 1-128 letters, digits, '-', '_' or '.', starting with a letter "
                 "or digit");
  }
  RETURN_IF_ERROR(ReadPath(n["file"], field + ".file", &t->file));
  if (n["pipelines"]) {
    const YAML::Node pl = n["pipelines"];
    if (!pl.IsSequence()) {
      return Error(field + ".pipelines", pl,
                   absl::StrCat("expected a list of pipeline names, got ", DescribeNode(pl)));
    }
    t->pipelines.emplace();
    for (size_t i = 0; i < pl.size(); ++i) {
      const std::string f = absl::StrCat(field, ".pipelines[", i, "]");
      std::string name;
      RETURN_IF_ERROR(ReadString(pl[i], f, &name));
      const bool known = std::any_of(c.pipelines.begin(), c.pipelines.end(),
                                     [&](const PipelineSpec& p) { return p.config.name == name; });
      if (!known) return Error(f, pl[i], absl::StrCat("no pipeline named '", name, "'"));
      t->pipelines->insert(name);
    }
  }
  if (n["operator"]) RETURN_IF_ERROR(ReadBool(n["operator"], field + ".operator", &t->is_operator));
  return absl::OkStatus();
}

absl::Status Schema::ParseAccess(const YAML::Node& n, const DaemonConfig& c,
                                 AccessConfig* a) const {
  RETURN_IF_ERROR(CheckMap(n, "access", {"tokens", "require_token_on_unix"}));
  if (n["tokens"]) {
    const YAML::Node tl = n["tokens"];
    if (!tl.IsSequence()) {
      return Error("access.tokens", tl,
                   absl::StrCat("expected a list of {name, file, pipelines, operator}, got ",
                                DescribeNode(tl)));
    }
    std::set<std::string> names;
    std::set<std::string> files;
    for (size_t i = 0; i < tl.size(); ++i) {
      const std::string f = absl::StrCat("access.tokens[", i, "]");
      TokenSpec t;
      RETURN_IF_ERROR(ParseToken(f, tl[i], c, &t));
      if (!names.insert(t.name).second) {
        return Error(f + ".name", tl[i]["name"], absl::StrCat("duplicate token name '", t.name, "'"));
      }
      if (!files.insert(t.file).second) {
        return Error(f + ".file", tl[i]["file"],
                     absl::StrCat("'", t.file, "' is the file of another token too"));
      }
      a->tokens.push_back(std::move(t));
    }
  }
  if (n["require_token_on_unix"]) {
    RETURN_IF_ERROR(ReadBool(n["require_token_on_unix"], "access.require_token_on_unix",
                             &a->require_token_on_unix));
    if (a->require_token_on_unix && a->tokens.empty()) {
      return Error("access.require_token_on_unix", n["require_token_on_unix"],
                   "needs access.tokens (no client could connect)");
    }
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseEngine(const YAML::Node& n, EngineOptions* e) const {
  RETURN_IF_ERROR(
      CheckMap(n, "engine",
               {"fetch_queue_capacity", "fetch_queue_bytes", "fetch_concurrency",
                "decode_concurrency",
                "fetch_retry_max_attempts", "fetch_retry_initial_backoff_ms",
                "fetch_retry_max_backoff_ms", "fetch_retry_deadline_seconds"}));
  if (n["fetch_queue_capacity"]) {
    RETURN_IF_ERROR(ReadUintAs(n["fetch_queue_capacity"], "engine.fetch_queue_capacity", 0,
                                        65536, &e->fetch_queue_capacity));
  }
  if (n["fetch_queue_bytes"]) {
    RETURN_IF_ERROR(
        ReadSize(n["fetch_queue_bytes"], "engine.fetch_queue_bytes", 1, 0, &e->fetch_queue_bytes));
  }
  if (n["fetch_concurrency"]) {
    RETURN_IF_ERROR(ReadUintAs(n["fetch_concurrency"], "engine.fetch_concurrency", 1, 4096,
                                        &e->fetch_concurrency));
  }
  if (n["decode_concurrency"]) {
    RETURN_IF_ERROR(ReadUintAs(n["decode_concurrency"], "engine.decode_concurrency", 0,
                                        4096, &e->decode_concurrency));
  }
  // Errors of the system (out of fds, EIO, ...) while fetching a sample:
  // retried with backoff, then the stream ends with UNAVAILABLE.
  if (n["fetch_retry_max_attempts"]) {
    RETURN_IF_ERROR(ReadUintAs(n["fetch_retry_max_attempts"], "engine.fetch_retry_max_attempts",
                               1, 1000, &e->fetch_retry_max_attempts));
  }
  uint32_t initial_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(e->fetch_retry_initial_backoff));
  uint32_t max_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(e->fetch_retry_max_backoff));
  if (n["fetch_retry_initial_backoff_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["fetch_retry_initial_backoff_ms"],
                               "engine.fetch_retry_initial_backoff_ms", 0, 60'000, &initial_ms));
  }
  if (n["fetch_retry_max_backoff_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["fetch_retry_max_backoff_ms"], "engine.fetch_retry_max_backoff_ms",
                               0, 600'000, &max_ms));
  }
  if (max_ms < initial_ms) {
    return Error("engine.fetch_retry_max_backoff_ms",
                 n["fetch_retry_max_backoff_ms"] ? n["fetch_retry_max_backoff_ms"]
                                                 : n["fetch_retry_initial_backoff_ms"],
                 absl::StrCat("must be at least fetch_retry_initial_backoff_ms (", initial_ms,
                              " ms), got ", max_ms, " ms"));
  }
  e->fetch_retry_initial_backoff = absl::Milliseconds(initial_ms);
  e->fetch_retry_max_backoff = absl::Milliseconds(max_ms);
  if (n["fetch_retry_deadline_seconds"]) {
    double seconds = 0;
    RETURN_IF_ERROR(ReadDouble(n["fetch_retry_deadline_seconds"],
                               "engine.fetch_retry_deadline_seconds", 0.001, 86400, &seconds));
    e->fetch_retry_deadline = absl::Seconds(seconds);
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseDataset(const std::string& field, const YAML::Node& n,
                                  DatasetSpec* d) const {
  RETURN_IF_ERROR(
      CheckMap(n, field, {"root", "list", "urls", "shards", "label_key", "shuffle_buffer"}));
  if (n["shards"]) {
    if (n["root"] || n["list"] || n["urls"]) {
      return Error(field, n, "give `shards` or `root`/`list`/`urls`, not both");
    }
    d->kind = DatasetSpec::Kind::kTarShards;
    RETURN_IF_ERROR(ParseShards(field + ".shards", n["shards"], d));
    if (n["label_key"]) {
      RETURN_IF_ERROR(ReadString(n["label_key"], field + ".label_key", &d->label_key));
      const bool ok = !d->label_key.empty() && d->label_key.size() <= 64 &&
                      std::all_of(d->label_key.begin(), d->label_key.end(), [](char ch) {
                        return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                               ch == '-' || ch == '.';
                      });
      if (!ok) {
        return Error(field + ".label_key", n["label_key"],
                     "must be a member extension such as `cls` (letters, digits, '_', '-', '.')");
      }
    }
    if (n["shuffle_buffer"]) {
      RETURN_IF_ERROR(ReadUint(n["shuffle_buffer"], field + ".shuffle_buffer", 0,
                               kMaxShuffleBuffer, &d->shuffle_buffer));
    }
    return absl::OkStatus();
  }
  for (const char* key : {"label_key", "shuffle_buffer"}) {
    if (n[key]) return Error(Join(field, key), n[key], "only for tar shards (`shards`)");
  }
  if (n["urls"]) {
    if (n["list"] || n["root"]) {
      return Error(field + ".urls", n["urls"],
                   "a URL list stands alone: give `urls` without `root` or `list`");
    }
    d->kind = DatasetSpec::Kind::kUrlList;
    RETURN_IF_ERROR(ReadPath(n["urls"], field + ".urls", &d->list));
  } else if (n["list"]) {
    d->kind = DatasetSpec::Kind::kListFile;
    RETURN_IF_ERROR(ReadPath(n["list"], field + ".list", &d->list));
    if (n["root"]) RETURN_IF_ERROR(ReadPath(n["root"], field + ".root", &d->root));
  } else if (n["root"]) {
    d->kind = DatasetSpec::Kind::kImageFolder;
    RETURN_IF_ERROR(ReadPath(n["root"], field + ".root", &d->root));
  } else {
    return Error(field, n,
                 "needs `root` (an ImageFolder tree), `list` (a list file, with optional "
                 "`root`), `urls` (a list of URL<TAB>label lines) or `shards` (tar shards)");
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseShards(const std::string& field, const YAML::Node& n,
                                 DatasetSpec* d) const {
  std::vector<YAML::Node> items;
  if (n.IsSequence()) {
    for (const YAML::Node& item : n) items.push_back(item);
  } else {
    items.push_back(n);
  }
  if (items.empty()) return Error(field, n, "no shards listed");
  std::set<std::string> seen;
  for (const YAML::Node& item : items) {
    std::string pattern;
    RETURN_IF_ERROR(Scalar(item, field, "a path, a brace pattern or a list of them"));
    RETURN_IF_ERROR(ReadString(item, field, &pattern));
    if (pattern.empty()) return Error(field, item, "empty shard path");
    absl::StatusOr<std::vector<std::string>> expanded =
        ExpandBraces(pattern, kMaxShards - d->shards.size());
    if (!expanded.ok()) return Error(field, item, std::string(expanded.status().message()));
    for (const std::string& path : *expanded) {
      const bool remote = IsRemoteShard(path);
      if (!d->shards.empty() && remote != IsRemoteShard(d->shards.front())) {
        return Error(field, item,
                     "mixes local and remote shards: give all shards as paths or all as URLs");
      }
      std::string resolved = path;
      if (remote) {
        if (absl::StatusOr<remote::ObjectUrl> url = remote::ParseObjectUrl(path); !url.ok()) {
          return Error(field, item, std::string(url.status().message()));
        }
      } else {
        resolved = ResolvePath(base_dir(), path);
      }
      if (!seen.insert(resolved).second) {
        return Error(field, item,
                     absl::StrCat("shard '", EscapeText(remote::RedactUrl(resolved)),
                                  "' is listed twice (its samples would be read twice per epoch)"));
      }
      d->shards.push_back(std::move(resolved));
    }
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseRemote(const YAML::Node& n, remote::RemoteOptions* r) const {
  RETURN_IF_ERROR(CheckMap(n, "remote",
                           {"max_connections_per_host", "requests_per_second_per_host",
                            "connect_timeout_ms", "request_timeout_ms", "max_attempts",
                            "initial_backoff_ms", "max_backoff_ms", "read_ahead_bytes", "direct_http",
                            "s3"}));
  if (n["max_connections_per_host"]) {
    RETURN_IF_ERROR(ReadUintAs(n["max_connections_per_host"], "remote.max_connections_per_host",
                               1, 4096, &r->max_connections_per_host));
  }
  if (n["requests_per_second_per_host"]) {
    RETURN_IF_ERROR(ReadDouble(n["requests_per_second_per_host"],
                               "remote.requests_per_second_per_host", 0, 1e6,
                               &r->requests_per_second_per_host));
  }
  if (n["connect_timeout_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["connect_timeout_ms"], "remote.connect_timeout_ms", 1,
                               600'000, &r->connect_timeout_ms));
  }
  if (n["request_timeout_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["request_timeout_ms"], "remote.request_timeout_ms", 1,
                               3'600'000, &r->request_timeout_ms));
  }
  if (n["max_attempts"]) {
    RETURN_IF_ERROR(ReadUintAs(n["max_attempts"], "remote.max_attempts", 1, 100, &r->max_attempts));
  }
  if (n["initial_backoff_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["initial_backoff_ms"], "remote.initial_backoff_ms", 0, 60'000,
                               &r->initial_backoff_ms));
  }
  if (n["max_backoff_ms"]) {
    RETURN_IF_ERROR(ReadUintAs(n["max_backoff_ms"], "remote.max_backoff_ms", 0, 600'000,
                               &r->max_backoff_ms));
  }
  if (r->max_backoff_ms < r->initial_backoff_ms) {
    return Error("remote.max_backoff_ms", n["max_backoff_ms"] ? n["max_backoff_ms"] : n,
                 absl::StrCat("must be at least remote.initial_backoff_ms (",
                              r->initial_backoff_ms, " ms), got ", r->max_backoff_ms, " ms"));
  }
  if (n["read_ahead_bytes"]) {
    RETURN_IF_ERROR(ReadSize(n["read_ahead_bytes"], "remote.read_ahead_bytes", 1 << 20, 0,
                             &r->read_ahead_bytes));
  }
  if (n["direct_http"]) {
    RETURN_IF_ERROR(ReadBool(n["direct_http"], "remote.direct_http", &r->direct_http));
  }
  if (const YAML::Node s3 = n["s3"]) {
    RETURN_IF_ERROR(CheckMap(s3, "remote.s3", {"endpoint", "region", "profile"}));
    if (s3["endpoint"]) {
      RETURN_IF_ERROR(ReadString(s3["endpoint"], "remote.s3.endpoint", &r->s3_endpoint));
      if (!absl::StartsWith(r->s3_endpoint, "http://") &&
          !absl::StartsWith(r->s3_endpoint, "https://")) {
        return Error("remote.s3.endpoint", s3["endpoint"],
                     absl::StrCat("expected an http:// or https:// URL, got '",
                                  EscapeText(r->s3_endpoint), "'"));
      }
    }
    if (s3["region"]) RETURN_IF_ERROR(ReadString(s3["region"], "remote.s3.region", &r->s3_region));
    if (s3["profile"]) {
      RETURN_IF_ERROR(ReadString(s3["profile"], "remote.s3.profile", &r->s3_profile));
    }
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseAudio(const std::string& field, const YAML::Node& n,
                                TransformSpec* t) const {
  AudioSpec& a = t->audio;
  auto sub = [&](const char* key) { return absl::StrCat(field, ".", key); };
  if (!n) {  // all defaults: 16 kHz mono, one-second clips
    a.clip_samples = a.sample_rate;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckMap(n, field,
                           {"sample_rate", "channels", "clip_samples", "clip_seconds", "crop",
                            "padding", "max_samples", "max_duration_seconds"}));
  int e = 0;
  if (n["sample_rate"]) {
    RETURN_IF_ERROR(ReadUintAs(n["sample_rate"], sub("sample_rate"), kMinAudioSampleRate,
                               kMaxAudioSampleRate, &a.sample_rate));
  }
  if (n["channels"]) RETURN_IF_ERROR(ReadUintAs(n["channels"], sub("channels"), 1, 2, &a.channels));
  if (n["clip_samples"] && n["clip_seconds"]) {
    return Error(sub("clip_samples"), n["clip_samples"],
                 "give either `clip_samples` or `clip_seconds`, not both");
  }
  if (n["clip_samples"]) {
    RETURN_IF_ERROR(ReadUintAs(n["clip_samples"], sub("clip_samples"), 1, kMaxAudioClipSamples,
                               &a.clip_samples));
  } else if (n["clip_seconds"]) {
    double seconds = 0;
    RETURN_IF_ERROR(ReadDouble(n["clip_seconds"], sub("clip_seconds"), 1e-6, 86400, &seconds));
    const double samples = std::round(seconds * a.sample_rate);
    if (samples < 1 || samples > static_cast<double>(kMaxAudioClipSamples)) {
      return Error(sub("clip_seconds"), n["clip_seconds"],
                   absl::StrCat("gives ", absl::StrFormat("%.0f", samples), " samples at ", a.sample_rate,
                                " Hz; must be 1 to ", kMaxAudioClipSamples));
    }
    a.clip_samples = static_cast<int64_t>(samples);
  } else {
    a.clip_samples = a.sample_rate;  // one second
  }
  if (n["crop"]) {
    RETURN_IF_ERROR(ReadEnum(n["crop"], sub("crop"), {"auto", "random", "centre", "center"}, &e));
    a.crop = e == 0 ? AudioCrop::kAuto : e == 1 ? AudioCrop::kRandom : AudioCrop::kCentre;
  }
  if (n["padding"]) {
    RETURN_IF_ERROR(ReadEnum(n["padding"], sub("padding"), {"end", "both"}, &e));
    a.padding = e == 0 ? AudioPadding::kEnd : AudioPadding::kBoth;
  }
  if (n["max_samples"]) {
    RETURN_IF_ERROR(
        ReadUint(n["max_samples"], sub("max_samples"), 1, uint64_t{1} << 34, &a.max_samples));
  }
  if (n["max_duration_seconds"]) {
    RETURN_IF_ERROR(ReadDouble(n["max_duration_seconds"], sub("max_duration_seconds"), 0.001,
                               1e7, &a.max_duration_seconds));
  }
  return absl::OkStatus();
}

const std::vector<std::string> kPipelineFields = {"dataset",
                                                  "kind",
                                                  "augment",
                                                  "size",
                                                  "height",
                                                  "width",
                                                  "layout",
                                                  "dtype",
                                                  "mean",
                                                  "std",
                                                  "scale",
                                                  "ratio",
                                                  "flip_probability",
                                                  "resize_size",
                                                  "dct_scaling",
                                                  "max_pixels",
                                                  "max_decode_memory",
                                                  "max_decode_seconds",
                                                  "max_batch_size",
                                                  "error_policy",
                                                  "max_failure_rate",
                                                  "failure_rate_min_samples",
                                                  "max_file_bytes",
                                                  "clip_frames",
                                                  "frame_stride",
                                                  "fps",
                                                  "clip_start",
                                                  "max_frames_decoded",
                                                  "max_duration_seconds",
                                                  "autorotate",
                                                  "audio"};

// The video fields (kind video): refused for other kinds, so that a typo'd
// kind does not silently drop them.
absl::Status Schema::ParseVideoFields(const std::string& f, const YAML::Node& n,
                                      TransformSpec* t) const {
  auto sub = [&](const char* key) { return absl::StrCat(f, ".", key); };
  static constexpr const char* kVideoFields[] = {"clip_frames", "frame_stride",
                                                 "fps",         "clip_start",
                                                 "max_frames_decoded", "max_duration_seconds",
                                                 "autorotate"};
  if (t->kind != MediaKind::kVideo) {
    for (const char* key : kVideoFields) {
      if (n[key]) return Error(sub(key), n[key], "is a video field; it needs `kind: video`");
    }
    return absl::OkStatus();
  }
  VideoSpec& v = t->video;
  v.clip_start = t->mode == AugmentMode::kTrain ? ClipStart::kRandom : ClipStart::kCenter;
  if (n["clip_frames"]) {
    RETURN_IF_ERROR(
        ReadUintAs(n["clip_frames"], sub("clip_frames"), 1, kMaxClipFrames, &v.clip_frames));
  }
  if (n["frame_stride"] && n["fps"]) {
    return Error(sub("fps"), n["fps"], "give either `frame_stride` or `fps`, not both");
  }
  if (n["frame_stride"]) {
    RETURN_IF_ERROR(
        ReadUintAs(n["frame_stride"], sub("frame_stride"), 1, kMaxFrameStride, &v.frame_stride));
  }
  if (n["fps"]) RETURN_IF_ERROR(ReadDouble(n["fps"], sub("fps"), 0.001, kMaxClipFps, &v.fps));
  int e = 0;
  if (n["clip_start"]) {
    RETURN_IF_ERROR(ReadEnum(n["clip_start"], sub("clip_start"), {"random", "center", "start"}, &e));
    v.clip_start = e == 0 ? ClipStart::kRandom : e == 1 ? ClipStart::kCenter : ClipStart::kStart;
  }
  if (n["max_frames_decoded"]) {
    RETURN_IF_ERROR(ReadUintAs(n["max_frames_decoded"], sub("max_frames_decoded"), 1, 1 << 24,
                               &v.max_frames_decoded));
  }
  if (v.max_frames_decoded < v.clip_frames) {
    return Error(sub("max_frames_decoded"), n["max_frames_decoded"] ? n["max_frames_decoded"] : n,
                 absl::StrCat("must be at least clip_frames (", v.clip_frames, "), got ",
                              v.max_frames_decoded));
  }
  if (n["max_duration_seconds"]) {
    RETURN_IF_ERROR(ReadDouble(n["max_duration_seconds"], sub("max_duration_seconds"), 0.001, 1e7,
                               &v.max_duration_seconds));
  }
  if (n["autorotate"]) RETURN_IF_ERROR(ReadBool(n["autorotate"], sub("autorotate"), &v.autorotate));
  if (t->dtype != DType::kUint8) {
    return Error(sub("dtype"), n["dtype"], "must be uint8 for video pipelines (clips are uint8 only)");
  }
  return absl::OkStatus();
}

absl::Status Schema::ParsePipeline(const std::string& name, const YAML::Node& n,
                                   const DaemonConfig& c, PipelineSpec* p) const {
  const std::string f = absl::StrCat("pipelines.", name);
  auto sub = [&](const char* key) { return absl::StrCat(f, ".", key); };
  RETURN_IF_ERROR(CheckMap(n, f, kPipelineFields));
  PipelineConfig& pc = p->config;
  TransformSpec& t = pc.transform;
  pc.name = name;

  if (!n["dataset"]) {
    return Error(f, n, "missing `dataset` (give dataset.root, dataset.list or dataset.shards)");
  }
  RETURN_IF_ERROR(ParseDataset(sub("dataset"), n["dataset"], &p->dataset));
  if (!c.allowed_roots.empty()) {
    // Checked on the paths as written (".." folded, no file system access);
    // LoadPipelines checks again with symlinks resolved.
    for (const DatasetPath& dp : DatasetPaths(*p)) {
      bool ok = false;
      for (const std::string& allowed : c.allowed_roots) ok |= PathIsUnder(dp.path, allowed);
      if (!ok) {
        const YAML::Node at = absl::EndsWith(dp.field, ".list")     ? n["dataset"]["list"]
                              : absl::EndsWith(dp.field, ".shards") ? n["dataset"]["shards"]
                                                                    : n["dataset"]["root"];
        return Error(dp.field, at, OutsideAllowedRoots(dp.path, dp.path, c.allowed_roots));
      }
    }
  }

  int e = 0;
  if (n["kind"]) {
    RETURN_IF_ERROR(ReadEnum(n["kind"], sub("kind"), {"image", "video", "audio"}, &e));
    t.kind = e == 1 ? MediaKind::kVideo : e == 2 ? MediaKind::kAudio : MediaKind::kImage;
  }
  if (n["audio"] && t.kind != MediaKind::kAudio) {
    return Error(sub("audio"), n["audio"], "is only for `kind: audio`");
  }
  if (n["augment"]) {
    RETURN_IF_ERROR(ReadEnum(n["augment"], sub("augment"), {"train", "eval"}, &e));
    t.mode = e == 0 ? AugmentMode::kTrain : AugmentMode::kEval;
  }
  if (n["size"] && (n["height"] || n["width"])) {
    return Error(sub("size"), n["size"], "give either `size` or `height`/`width`, not both");
  }
  constexpr uint64_t kMaxSide = 16384;
  if (n["size"]) {
    const YAML::Node s = n["size"];
    if (s.IsSequence()) {
      if (s.size() != 2) {
        return Error(sub("size"), s,
                     absl::StrCat("expected [height, width], got ", s.size(), " items"));
      }
      RETURN_IF_ERROR(ReadUintAs(s[0], sub("size[0]"), 1, kMaxSide, &t.output_height));
      RETURN_IF_ERROR(ReadUintAs(s[1], sub("size[1]"), 1, kMaxSide, &t.output_width));
    } else {
      RETURN_IF_ERROR(ReadUintAs(s, sub("size"), 1, kMaxSide, &t.output_height));
      t.output_width = t.output_height;
    }
  }
  if (n["height"])
    RETURN_IF_ERROR(ReadUintAs(n["height"], sub("height"), 1, kMaxSide, &t.output_height));
  if (n["width"])
    RETURN_IF_ERROR(ReadUintAs(n["width"], sub("width"), 1, kMaxSide, &t.output_width));
  if (n["layout"]) {
    RETURN_IF_ERROR(ReadEnum(n["layout"], sub("layout"), {"nchw", "nhwc"}, &e));
    t.layout = e == 0 ? Layout::kNCHW : Layout::kNHWC;
  }
  if (n["dtype"]) {
    RETURN_IF_ERROR(
        ReadEnum(n["dtype"], sub("dtype"), {"uint8", "float32", "float16"}, &e));
    t.dtype = e == 0 ? DType::kUint8 : e == 1 ? DType::kFloat32 : DType::kFloat16;
  }
  if (t.kind == MediaKind::kAudio) {
    if (!n["dtype"]) t.dtype = DType::kFloat32;
    if (t.dtype != DType::kFloat32) {
      return Error(sub("dtype"), n["dtype"],
                   absl::StrCat("must be float32 for kind audio, got ", ToString(t.dtype)));
    }
    RETURN_IF_ERROR(ParseAudio(sub("audio"), n["audio"], &t));
  }
  std::vector<double> v;
  if (n["mean"]) {
    RETURN_IF_ERROR(ReadNumbers(n["mean"], sub("mean"), 3, -1e6, 1e6, &v));
    for (int i = 0; i < 3; ++i) t.mean[i] = static_cast<float>(v[i]);
  }
  if (n["std"]) {
    RETURN_IF_ERROR(ReadNumbers(n["std"], sub("std"), 3, 1e-12, 1e6, &v));
    for (int i = 0; i < 3; ++i) t.std[i] = static_cast<float>(v[i]);
  }
  if (n["scale"]) {
    RETURN_IF_ERROR(ReadNumbers(n["scale"], sub("scale"), 2, 1e-9, 1.0, &v));
    if (v[0] > v[1]) return Error(sub("scale"), n["scale"], "min must not exceed max");
    t.scale_min = v[0];
    t.scale_max = v[1];
  }
  if (n["ratio"]) {
    RETURN_IF_ERROR(ReadNumbers(n["ratio"], sub("ratio"), 2, 1e-9, 1e9, &v));
    if (v[0] > v[1]) return Error(sub("ratio"), n["ratio"], "min must not exceed max");
    t.ratio_min = v[0];
    t.ratio_max = v[1];
  }
  if (n["flip_probability"]) {
    RETURN_IF_ERROR(
        ReadDouble(n["flip_probability"], sub("flip_probability"), 0, 1, &t.flip_probability));
  }
  if (n["resize_size"]) {
    RETURN_IF_ERROR(
        ReadUintAs(n["resize_size"], sub("resize_size"), 1, kMaxSide, &t.resize_size));
    if (t.mode == AugmentMode::kEval &&
        (t.resize_size < t.output_height || t.resize_size < t.output_width)) {
      return Error(sub("resize_size"), n["resize_size"],
                   absl::StrCat("must be at least the output size in eval mode (", t.output_height,
                                "x", t.output_width, "; no padding), got ", t.resize_size));
    }
  } else {
    // torchvision's convention: resize to size/0.875 (224 → 256) before the
    // centre crop.
    const int side = std::max(t.output_height, t.output_width);
    t.resize_size = std::min<int>(kMaxSide, (side * 256 + 223) / 224);
  }
  if (n["dct_scaling"])
    RETURN_IF_ERROR(ReadBool(n["dct_scaling"], sub("dct_scaling"), &t.dct_scaling));
  if (n["max_pixels"]) {
    RETURN_IF_ERROR(
        ReadUint(n["max_pixels"], sub("max_pixels"), 1, uint64_t{1} << 40, &t.max_pixels));
  }
  if (n["max_decode_memory"]) {
    RETURN_IF_ERROR(ReadSize(n["max_decode_memory"], sub("max_decode_memory"), kMinDecodeMemory,
                             0, &t.max_decode_memory));
  }
  if (n["max_decode_seconds"]) {
    RETURN_IF_ERROR(ReadDouble(n["max_decode_seconds"], sub("max_decode_seconds"), 0.001,
                               kMaxDecodeSeconds, &t.max_decode_seconds));
  }
  RETURN_IF_ERROR(ParseVideoFields(f, n, &t));
  if (n["max_batch_size"]) {
    RETURN_IF_ERROR(
        ReadUintAs(n["max_batch_size"], sub("max_batch_size"), 1, 65536, &pc.max_batch_size));
  }
  if (n["error_policy"]) {
    RETURN_IF_ERROR(
        ReadEnum(n["error_policy"], sub("error_policy"), {"skip", "fail_fast"}, &e));
    pc.error_policy = e == 0 ? ErrorPolicy::kSkip : ErrorPolicy::kFailFast;
  }
  if (n["max_failure_rate"]) {
    RETURN_IF_ERROR(
        ReadDouble(n["max_failure_rate"], sub("max_failure_rate"), 0, 1, &pc.max_failure_rate));
  }
  if (n["failure_rate_min_samples"]) {
    RETURN_IF_ERROR(ReadUint(n["failure_rate_min_samples"],
                                      sub("failure_rate_min_samples"), 0, uint64_t{1} << 40,
                                      &pc.failure_rate_min_samples));
  }
  if (n["max_file_bytes"]) {
    RETURN_IF_ERROR(
        ReadSize(n["max_file_bytes"], sub("max_file_bytes"), 1, 0, &pc.max_file_bytes));
  }

  // The core's own check, as the last word (names the transform field).
  if (absl::Status st = ValidateTransformSpec(t); !st.ok()) {
    return Error(f, n, std::string(st.message()));
  }
  return absl::OkStatus();
}

absl::Status Schema::ParseTop(const YAML::Node& root, DaemonConfig* c) const {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file(), ": expected a map of settings at the top, got ", DescribeNode(root)));
  }
  RETURN_IF_ERROR(
      CheckMap(root, "",
               {"listen", "threads", "memory_budget", "max_streams", "allowed_roots", "log_level",
                "shutdown_timeout_seconds", "stream_idle_timeout_seconds", "per_client",
                "engine", "pipelines", "access", "metrics", "log_format", "remote"}));
  if (root["remote"]) RETURN_IF_ERROR(ParseRemote(root["remote"], &c->remote));
  if (root["listen"]) RETURN_IF_ERROR(ParseListen(root["listen"], &c->listen));
  if (root["threads"]) {
    RETURN_IF_ERROR(
        ReadUintAs(root["threads"], "threads", 0, 1024, &c->engine.num_threads));
  }
  if (root["engine"]) RETURN_IF_ERROR(ParseEngine(root["engine"], &c->engine));
  c->memory_budget = DefaultMemoryBudget(c->system);
  if (root["memory_budget"]) {
    RETURN_IF_ERROR(ReadSize(root["memory_budget"], "memory_budget", 1 << 20,
                             c->system.MemoryLimit(), &c->memory_budget));
  }
  if (root["max_streams"]) {
    RETURN_IF_ERROR(
        ReadUintAs(root["max_streams"], "max_streams", 1, 100000, &c->max_streams));
  }
  if (root["log_level"]) {
    RETURN_IF_ERROR(ReadString(root["log_level"], "log_level", &c->log_level));
    if (absl::Status st = ValidateLogLevel(c->log_level); !st.ok()) {
      return Error("log_level", root["log_level"], std::string(st.message()));
    }
  }
  if (root["log_format"]) {
    RETURN_IF_ERROR(ReadString(root["log_format"], "log_format", &c->log_format));
    if (absl::Status st = ValidateLogFormat(c->log_format); !st.ok()) {
      return Error("log_format", root["log_format"], std::string(st.message()));
    }
  }
  if (const YAML::Node m = root["metrics"]) {
    RETURN_IF_ERROR(CheckMap(m, "metrics", {"listen"}));
    if (m["listen"]) {
      RETURN_IF_ERROR(ReadString(m["listen"], "metrics.listen", &c->metrics.listen));
      if (absl::Status st = ValidateMetricsAddress(c->metrics.listen);
          !c->metrics.listen.empty() && !st.ok()) {
        return Error("metrics.listen", m["listen"], std::string(st.message()));
      }
    }
  }
  if (root["shutdown_timeout_seconds"]) {
    RETURN_IF_ERROR(ReadDouble(root["shutdown_timeout_seconds"],
                                        "shutdown_timeout_seconds", 0, 3600,
                                        &c->shutdown_timeout_seconds));
  }
  if (root["stream_idle_timeout_seconds"]) {
    RETURN_IF_ERROR(ReadDouble(root["stream_idle_timeout_seconds"],
                               "stream_idle_timeout_seconds", 0, 7 * 86400,
                               &c->stream_idle_timeout_seconds));
  }
  if (const YAML::Node pc = root["per_client"]) {
    RETURN_IF_ERROR(
        CheckMap(pc, "per_client", {"max_streams", "max_credits", "max_memory"}));
    if (pc["max_streams"]) {
      RETURN_IF_ERROR(ReadUintAs(pc["max_streams"], "per_client.max_streams", 0, 100000,
                                 &c->per_client.max_streams));
    }
    if (pc["max_credits"]) {
      RETURN_IF_ERROR(ReadUintAs(pc["max_credits"], "per_client.max_credits", 0, 100000000,
                                 &c->per_client.max_credits));
    }
    if (pc["max_memory"]) {
      RETURN_IF_ERROR(ReadSize(pc["max_memory"], "per_client.max_memory", 0,
                               c->system.MemoryLimit(), &c->per_client.max_bytes));
    }
  }
  if (root["allowed_roots"]) {
    const YAML::Node ar = root["allowed_roots"];
    if (!ar.IsSequence()) {
      return Error("allowed_roots", ar,
                   absl::StrCat("expected a list of directories, got ", DescribeNode(ar)));
    }
    for (size_t i = 0; i < ar.size(); ++i) {
      std::string p;
      RETURN_IF_ERROR(ReadPath(ar[i], absl::StrCat("allowed_roots[", i, "]"), &p));
      c->allowed_roots.push_back(p);
    }
  }

  const YAML::Node pl = root["pipelines"];
  if (!pl || pl.IsNull() || (pl.IsMap() && pl.size() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file(), ": field pipelines: no pipelines defined (at least one is needed)"));
  }
  if (!pl.IsMap()) {
    return Error("pipelines", pl,
                 absl::StrCat("expected a map of name: settings, got ", DescribeNode(pl)));
  }
  std::set<std::string> names;
  for (const auto& kv : pl) {
    if (!kv.first.IsScalar())
      return Error("pipelines", kv.first, "pipeline names must be plain names");
    const std::string name = kv.first.Scalar();
    if (!ValidPipelineName(name)) {
      return Error(absl::StrCat("pipelines.", name), kv.first,
                   "a pipeline name is 1-128 letters, digits, '-', '_' or '.', starting with a "
                   "letter or digit");
    }
    if (!names.insert(name).second) {
      return Error(absl::StrCat("pipelines.", name), kv.first, "duplicate pipeline name");
    }
    PipelineSpec spec;
    RETURN_IF_ERROR(ParsePipeline(name, kv.second, *c, &spec));
    c->pipelines.push_back(std::move(spec));
  }
  // After the pipelines: tokens name the pipelines they may open.
  if (root["access"]) RETURN_IF_ERROR(ParseAccess(root["access"], *c, &c->access));
  return ValidateDaemonFields(*c);
}

}  // namespace

uint64_t DefaultMemoryBudget(const SystemInfo& system) {
  return std::clamp<uint64_t>(system.MemoryLimit() / 4, 256 * kMiB, 16 * kGiB);
}

absl::Status ValidateLogLevel(const std::string& level) {
  static const std::set<std::string> kLevels = {"trace",   "debug", "info",     "warn",
                                                "warning", "error", "critical", "off"};
  if (kLevels.count(level) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "' (trace, debug, info, warn, error, critical, off)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDaemonFields(const DaemonConfig& c) {
  auto bad = [&](const std::string& field, const absl::Status& st) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.source, ": field ", field, ": ", st.message()));
  };
  if (c.listen.unix_path.empty() && c.listen.tcp.empty()) {
    return bad("listen", absl::InvalidArgumentError("needs a unix socket, a TCP address or both"));
  }
  if (!c.listen.unix_path.empty()) {
    if (absl::Status st = ValidateUnixPath(c.listen.unix_path); !st.ok())
      return bad("listen.unix", st);
  }
  if (!c.listen.tcp.empty()) {
    if (absl::Status st = ValidateTcpAddress(c.listen.tcp); !st.ok()) return bad("listen.tcp", st);
  }
  if (!c.listen.data_tcp.empty() && c.listen.data_tcp != "none") {
    if (absl::Status st = ValidateTcpAddress(c.listen.data_tcp); !st.ok()) {
      return bad("listen.data_tcp", st);
    }
  }
  if (!c.listen.tcp.empty() && !IsLoopbackAddress(c.listen.tcp) && !c.listen.tls.enabled() &&
      c.access.tokens.empty() && !c.listen.allow_insecure_tcp) {
    return bad("listen.tcp",
               absl::InvalidArgumentError(absl::StrCat(
                   "'", c.listen.tcp,
                   "' is not a loopback address, and TCP has neither TLS (listen.tls) nor bearer "
                   "tokens (access.tokens): anyone who reaches the port could read every "
                   "dataset. Configure one of them, bind 127.0.0.1, or set "
                   "listen.allow_insecure_tcp: true to serve it anyway")));
  }
  if (c.engine.num_threads < 0 || c.engine.num_threads > 1024) {
    return bad("threads", absl::InvalidArgumentError("must be within [0, 1024] (0: one per core)"));
  }
  if (c.memory_budget < (1u << 20)) {
    return bad("memory_budget", absl::InvalidArgumentError("must be at least 1 MiB"));
  }
  if (absl::Status st = ValidateLogLevel(c.log_level); !st.ok()) return bad("log_level", st);
  if (absl::Status st = ValidateLogFormat(c.log_format); !st.ok()) return bad("log_format", st);
  if (!c.metrics.listen.empty()) {
    if (absl::Status st = ValidateMetricsAddress(c.metrics.listen); !st.ok())
      return bad("metrics.listen", st);
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseConfig(const std::string& yaml, const std::string& file_name,
                                         const std::string& base_dir, const SystemInfo& system) {
  if (base_dir.empty() || base_dir[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": the folder relative paths resolve against must be absolute, got '",
                     base_dir, "'"));
  }
  DaemonConfig c;
  c.source = file_name;
  c.system = system;
  Schema schema(file_name, ResolvePath("/", base_dir));
  try {
    YAML::Node root = YAML::Load(yaml);
    RETURN_IF_ERROR(schema.ParseTop(root, &c));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s", file_name,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return c;
}

}  // namespace conveyor::server
