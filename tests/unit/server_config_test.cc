// Tests of conveyord's config — the pure parse (server/config/config.h), the steps
// that touch the disk (server/config/loader.h), and their pieces (byte
// sizes, YAML field reads, memory probing) — and of the command-line flags
// (server/flags.h): defaults, every field, and one refusal per kind of
// mistake, each naming the field. Compiled only when the server library is
// built (CONVEYOR_HAVE_SERVER comes with conveyor_server_lib).
#ifdef CONVEYOR_HAVE_SERVER

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/engine/output_cache.h"
#include "server/access/token_identifier.h"
#include "server/config/byte_size.h"
#include "server/config/config.h"
#include "server/config/loader.h"
#include "server/config/system_cpus.h"
#include "server/config/system_memory.h"
#include "server/config/yaml_fields.h"
#include "server/flags.h"
#include "tests/unit/temp_dir.h"

namespace conveyor::server {
namespace {

namespace fs = std::filesystem;

using ::conveyor::testing::TempDir;

// The machine the tests parse for: 8 GiB, no cgroup limit (never this
// process's own machine: parsing must not probe it).
constexpr uint64_t kGiB = uint64_t{1} << 30;
const SystemInfo kMachine{8 * kGiB, 0};

absl::StatusOr<DaemonConfig> Parse(const std::string& yaml, const std::string& base = "/etc") {
  return ParseConfig(yaml, "test.yaml", base, kMachine);
}

// The parse fails and its message holds every one of `parts`.
void ExpectRefused(const std::string& yaml, std::initializer_list<std::string> parts,
                   const std::string& base = "/etc") {
  absl::StatusOr<DaemonConfig> c = Parse(yaml, base);
  INFO(yaml);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(c.status().message());
  INFO(msg);
  for (const std::string& p : parts) CHECK(msg.find(p) != std::string::npos);
}

const char kMinimal[] = R"(
pipelines:
  imagenet:
    dataset: {root: /data/imagenet/train}
)";

TEST_CASE("a minimal config gets every default", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(kMinimal);
  REQUIRE(c.ok());
  CHECK(c->source == "test.yaml");
  CHECK(c->listen.unix_path == kDefaultUnixSocket);
  CHECK(c->listen.unix_mode == 0660);
  CHECK(c->listen.tcp.empty());
  CHECK(c->engine.num_threads == 0);
  CHECK(c->memory_budget == DefaultMemoryBudget(kMachine));
  CHECK(c->memory_budget == 2 * kGiB);  // a quarter of kMachine's 8 GiB
  CHECK(c->memory_budget >= (256u << 20));
  CHECK(c->memory_budget <= (16ull << 30));
  CHECK(c->max_streams == 64);
  CHECK(c->allowed_roots.empty());
  CHECK(c->log_level == "info");
  CHECK(c->shutdown_timeout_seconds == 5.0);
  REQUIRE(c->pipelines.size() == 1);
  const PipelineSpec& p = c->pipelines[0];
  CHECK(p.config.name == "imagenet");
  CHECK(p.config.dataset == nullptr);  // loaded later
  CHECK(p.dataset.kind == DatasetSpec::Kind::kImageFolder);
  CHECK(p.dataset.root == "/data/imagenet/train");
  const TransformSpec defaults;
  const TransformSpec& t = p.config.transform;
  CHECK(t.mode == AugmentMode::kTrain);
  CHECK(t.output_height == 224);
  CHECK(t.output_width == 224);
  CHECK(t.layout == Layout::kNCHW);
  CHECK(t.dtype == DType::kUint8);
  CHECK(t.mean == defaults.mean);
  CHECK(t.std == defaults.std);
  CHECK(t.resize_size == 256);
  CHECK(t.flip_probability == defaults.flip_probability);
  CHECK(t.dct_scaling);
  CHECK(t.max_decode_memory == defaults.max_decode_memory);
  CHECK(t.max_decode_seconds == defaults.max_decode_seconds);
  const PipelineConfig pc_defaults;
  CHECK(p.config.max_batch_size == pc_defaults.max_batch_size);
  CHECK(p.config.error_policy == ErrorPolicy::kSkip);
  CHECK(p.config.max_failure_rate == pc_defaults.max_failure_rate);
  CHECK(p.config.failure_rate_min_samples == pc_defaults.failure_rate_min_samples);
  CHECK(p.config.max_file_bytes == pc_defaults.max_file_bytes);
}

TEST_CASE("every field is read", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
listen:
  unix: /run/x/conveyor.sock
  unix_mode: "0600"
  tcp: 127.0.0.1:0
threads: 3
memory_budget: 1.5GiB
max_streams: 7
allowed_roots: [/data]
log_level: debug
shutdown_timeout_seconds: 2.5
engine: {fetch_queue_capacity: 8, fetch_queue_bytes: 24MiB, fetch_concurrency: 2,
         decode_concurrency: 3,
         fetch_retry_max_attempts: 3, fetch_retry_initial_backoff_ms: 5,
         fetch_retry_max_backoff_ms: 40, fetch_retry_deadline_seconds: 2.5}
pipelines:
  train:
    dataset: {list: /data/in/train.txt, root: /data/in/images}
    augment: eval
    size: [160, 192]
    layout: NHWC
    dtype: float16
    mean: [0.5, 0.5, 0.5]
    std: [0.25, 0.25, 0.25]
    scale: [0.2, 0.9]
    ratio: [0.5, 2]
    flip_probability: 0
    resize_size: 200
    dct_scaling: false
    max_pixels: 1000000
    max_decode_memory: 48MiB
    max_decode_seconds: 0.25
    max_batch_size: 512
    error_policy: fail_fast
    max_failure_rate: 0.5
    failure_rate_min_samples: 10
    max_file_bytes: 2MiB
  small:
    dataset: {root: /data/small}
    height: 32
    width: 48
)");
  REQUIRE(c.ok());
  CHECK(c->listen.unix_path == "/run/x/conveyor.sock");
  CHECK(c->listen.unix_mode == 0600);
  CHECK(c->listen.tcp == "127.0.0.1:0");
  CHECK(c->engine.num_threads == 3);
  CHECK(c->engine.fetch_queue_capacity == 8);
  CHECK(c->engine.fetch_queue_bytes == (24u << 20));
  CHECK(c->engine.fetch_concurrency == 2);
  CHECK(c->engine.decode_concurrency == 3);
  CHECK(c->engine.fetch_retry_max_attempts == 3);
  CHECK(c->engine.fetch_retry_initial_backoff == absl::Milliseconds(5));
  CHECK(c->engine.fetch_retry_max_backoff == absl::Milliseconds(40));
  CHECK(c->engine.fetch_retry_deadline == absl::Milliseconds(2500));
  CHECK(c->memory_budget == (3ull << 29));
  CHECK(c->max_streams == 7);
  CHECK(c->allowed_roots == std::vector<std::string>{"/data"});
  CHECK(c->log_level == "debug");
  CHECK(c->shutdown_timeout_seconds == 2.5);
  REQUIRE(c->pipelines.size() == 2);
  const PipelineSpec& p = c->pipelines[0];
  CHECK(p.dataset.kind == DatasetSpec::Kind::kListFile);
  CHECK(p.dataset.list == "/data/in/train.txt");
  CHECK(p.dataset.root == "/data/in/images");
  const TransformSpec& t = p.config.transform;
  CHECK(t.mode == AugmentMode::kEval);
  CHECK(t.output_height == 160);
  CHECK(t.output_width == 192);
  CHECK(t.layout == Layout::kNHWC);
  CHECK(t.dtype == DType::kFloat16);
  CHECK(t.mean[1] == 0.5f);
  CHECK(t.std[2] == 0.25f);
  CHECK(t.scale_min == 0.2);
  CHECK(t.scale_max == 0.9);
  CHECK(t.ratio_min == 0.5);
  CHECK(t.ratio_max == 2.0);
  CHECK(t.flip_probability == 0.0);
  CHECK(t.resize_size == 200);
  CHECK_FALSE(t.dct_scaling);
  CHECK(t.max_pixels == 1000000);
  CHECK(t.max_decode_memory == (48u << 20));
  CHECK(t.max_decode_seconds == 0.25);
  CHECK(p.config.max_batch_size == 512);
  CHECK(p.config.error_policy == ErrorPolicy::kFailFast);
  CHECK(p.config.max_failure_rate == 0.5);
  CHECK(p.config.failure_rate_min_samples == 10);
  CHECK(p.config.max_file_bytes == (2u << 20));
  const TransformSpec& s = c->pipelines[1].config.transform;
  CHECK(s.output_height == 32);
  CHECK(s.output_width == 48);
  CHECK(s.resize_size == 55);  // 48 / 0.875, rounded up
}

TEST_CASE("relative paths resolve against the config's directory", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
listen: {unix: run/conveyor.sock}
allowed_roots: [../data]
pipelines:
  p: {dataset: {root: ../data/train}}
  q: {dataset: {list: ../data/list.txt}}
)",
                                         "/srv/conveyor/config");
  REQUIRE(c.ok());
  CHECK(c->listen.unix_path == "/srv/conveyor/config/run/conveyor.sock");
  CHECK(c->allowed_roots[0] == "/srv/conveyor/data");
  CHECK(c->pipelines[0].dataset.root == "/srv/conveyor/data/train");
  CHECK(c->pipelines[1].dataset.list == "/srv/conveyor/data/list.txt");
  CHECK(c->pipelines[1].dataset.root.empty());  // the list's directory
}

TEST_CASE("unknown fields are refused with their path", "[config]") {
  ExpectRefused("bogus: 1\n" + std::string(kMinimal), {"test.yaml: field bogus: unknown field"});
  ExpectRefused(
      R"(
pipelines:
  imagenet:
    dataset: {root: /data}
    batch: 3
)",
      {"test.yaml: field pipelines.imagenet.batch: unknown field", "max_batch_size", "(line 5)"});
  ExpectRefused(R"(
pipelines:
  imagenet:
    dataset: {root: /data, format: tar}
)",
                {"field pipelines.imagenet.dataset.format: unknown field"});
  ExpectRefused("listen: {socket: /x.sock}\n" + std::string(kMinimal),
                {"field listen.socket: unknown field"});
  ExpectRefused("engine: {threads: 2}\n" + std::string(kMinimal),
                {"field engine.threads: unknown field"});
}

TEST_CASE("the remote section: defaults, every field, refusals naming the field", "[config]") {
  auto d = Parse(kMinimal);
  REQUIRE(d.ok());
  const remote::RemoteOptions def;
  CHECK(d->remote.max_connections_per_host == def.max_connections_per_host);
  CHECK(d->remote.read_ahead_bytes == def.read_ahead_bytes);
  CHECK(d->remote.max_attempts == def.max_attempts);
  CHECK(d->remote.s3_endpoint.empty());
  CHECK_FALSE(d->remote.direct_http);
  CHECK(d->remote.io_threads == 1);
  auto c = Parse(R"(
remote:
  max_connections_per_host: 16
  requests_per_second_per_host: 250.5
  connect_timeout_ms: 1500
  request_timeout_ms: 20000
  max_attempts: 7
  initial_backoff_ms: 20
  max_backoff_ms: 800
  read_ahead_bytes: 64MiB
  direct_http: true
  io_threads: 3
  s3: {endpoint: "http://127.0.0.1:9000", region: eu-west-1, profile: train}
)" + std::string(kMinimal));
  REQUIRE(c.ok());
  const remote::RemoteOptions& r = c->remote;
  CHECK(r.max_connections_per_host == 16);
  CHECK(r.requests_per_second_per_host == 250.5);
  CHECK(r.connect_timeout_ms == 1500);
  CHECK(r.request_timeout_ms == 20000);
  CHECK(r.max_attempts == 7);
  CHECK(r.initial_backoff_ms == 20);
  CHECK(r.max_backoff_ms == 800);
  CHECK(r.read_ahead_bytes == 64ull << 20);
  CHECK(r.direct_http);
  CHECK(r.io_threads == 3);
  CHECK(r.s3_endpoint == "http://127.0.0.1:9000");
  CHECK(r.s3_region == "eu-west-1");
  CHECK(r.s3_profile == "train");
  ExpectRefused("remote: {max_connections_per_host: 0}\n" + std::string(kMinimal),
                {"field remote.max_connections_per_host"});
  ExpectRefused("remote: {requests_per_second_per_host: -1}\n" + std::string(kMinimal),
                {"field remote.requests_per_second_per_host"});
  ExpectRefused("remote: {max_attempts: 0}\n" + std::string(kMinimal),
                {"field remote.max_attempts"});
  ExpectRefused("remote: {initial_backoff_ms: 100, max_backoff_ms: 50}\n" + std::string(kMinimal),
                {"field remote.max_backoff_ms", "at least remote.initial_backoff_ms"});
  ExpectRefused("remote: {read_ahead_bytes: 1KiB}\n" + std::string(kMinimal),
                {"field remote.read_ahead_bytes"});
  ExpectRefused("remote: {direct_http: sometimes}\n" + std::string(kMinimal),
                {"field remote.direct_http"});
  ExpectRefused("remote: {io_threads: 0}\n" + std::string(kMinimal), {"field remote.io_threads"});
  ExpectRefused("remote: {io_threads: 65}\n" + std::string(kMinimal), {"field remote.io_threads"});
  ExpectRefused("remote: {s3: {endpoint: minio:9000}}\n" + std::string(kMinimal),
                {"field remote.s3.endpoint", "http:// or https://"});
  ExpectRefused("remote: {s3: {bucket: x}}\n" + std::string(kMinimal), {"remote.s3.bucket"});
  ExpectRefused("remote: {timeout: 3}\n" + std::string(kMinimal), {"remote.timeout"});
}

TEST_CASE("dataset.urls: a URL list, alone", "[config]") {
  auto c = Parse("pipelines:\n  web:\n    dataset: {urls: lists/web.tsv}\n", "/etc/conveyor");
  REQUIRE(c.ok());
  const DatasetSpec& d = c->pipelines[0].dataset;
  CHECK(d.kind == DatasetSpec::Kind::kUrlList);
  CHECK(d.list == "/etc/conveyor/lists/web.tsv");
  CHECK(DatasetPaths(c->pipelines[0]).size() == 1);
  CHECK(DatasetPaths(c->pipelines[0])[0].field == "pipelines.web.dataset.urls");
  ExpectRefused("pipelines:\n  web:\n    dataset: {urls: a.tsv, root: /data}\n",
                {"field pipelines.web.dataset.urls", "without `root` or `list`"});
}

TEST_CASE("LoadPipelines reads a URL list and refuses a bad URL naming its entry", "[config]") {
  TempDir dir;
  std::ofstream(dir.path() + "/urls.tsv") << "http://127.0.0.1:1/a.jpg\t0\ns3://bucket/b.jpg\t1\n";
  std::ofstream(dir.path() + "/bad.tsv")
      << "http://127.0.0.1:1/a.jpg\t0\nhttp://u:pw@/x?sig=S\t1\n";
  auto c = ParseConfig("pipelines:\n  good: {dataset: {urls: urls.tsv}}\n", "t.yaml", dir.path(),
                       kMachine);
  REQUIRE(c.ok());
  auto p = LoadPipelines(*c);
  REQUIRE(p.ok());
  REQUIRE(p->size() == 1);
  CHECK((*p)[0]->source != nullptr);
  CHECK((*p)[0]->dataset->size() == 2);
  c = ParseConfig("pipelines:\n  bad: {dataset: {urls: bad.tsv}}\n", "t.yaml", dir.path(),
                  kMachine);
  REQUIRE(c.ok());
  p = LoadPipelines(*c);
  REQUIRE_FALSE(p.ok());
  const std::string msg(p.status().message());
  INFO(msg);
  CHECK(msg.find("pipelines.bad.dataset.urls") != std::string::npos);
  CHECK(msg.find("entry 2") != std::string::npos);
  CHECK(msg.find("no host") != std::string::npos);
  CHECK(msg.find("pw") == std::string::npos);
  CHECK(msg.find("sig=S") == std::string::npos);
}

TEST_CASE("fetch retry limits are checked against each other and their ranges", "[config]") {
  ExpectRefused("engine: {fetch_retry_max_backoff_ms: 5}\n" + std::string(kMinimal),
                {"field engine.fetch_retry_max_backoff_ms",
                 "at least fetch_retry_initial_backoff_ms", "(10 ms), got 5 ms"});
  ExpectRefused("engine: {fetch_retry_max_attempts: 0}\n" + std::string(kMinimal),
                {"field engine.fetch_retry_max_attempts"});
  ExpectRefused("engine: {fetch_retry_deadline_seconds: 0}\n" + std::string(kMinimal),
                {"field engine.fetch_retry_deadline_seconds"});
  // The defaults are the engine's.
  auto c = Parse(kMinimal);
  REQUIRE(c.ok());
  CHECK(c->engine.fetch_retry_max_attempts == EngineOptions().fetch_retry_max_attempts);
  CHECK(c->engine.fetch_retry_max_backoff == EngineOptions().fetch_retry_max_backoff);
}

TEST_CASE("values of the wrong type are refused", "[config]") {
  ExpectRefused("threads: many\n" + std::string(kMinimal),
                {"field threads: expected an integer, got 'many'"});
  ExpectRefused("threads: 2.5\n" + std::string(kMinimal), {"field threads: expected an integer"});
  ExpectRefused("max_streams: [1]\n" + std::string(kMinimal),
                {"field max_streams: expected an integer, got a list"});
  ExpectRefused("listen: /run/x.sock\n" + std::string(kMinimal), {"field listen: expected a map"});
  ExpectRefused("allowed_roots: /data\n" + std::string(kMinimal),
                {"field allowed_roots: expected a list"});
  ExpectRefused(R"(
pipelines:
  p:
    dataset: {root: /data}
    mean: [0.5, 0.5]
)",
                {"field pipelines.p.mean: expected a list of 3 numbers, got 2 items"});
  ExpectRefused(R"(
pipelines:
  p:
    dataset: {root: /data}
    std: [0.5, zero, 0.5]
)",
                {"field pipelines.p.std[1]: expected a number"});
  ExpectRefused(R"(
pipelines:
  p:
    dataset: {root: /data}
    dct_scaling: maybe
)",
                {"field pipelines.p.dct_scaling: expected true or false"});
  ExpectRefused(R"(
pipelines:
  p:
    dataset: {root: [/data]}
)",
                {"field pipelines.p.dataset.root: expected a string, got a list"});
  ExpectRefused("pipelines: [a, b]\n", {"field pipelines: expected a map"});
  ExpectRefused("- just a list\n", {"test.yaml: expected a map of settings"});
}

TEST_CASE("bad enum values are refused listing the choices", "[config]") {
  const std::string head = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  ExpectRefused(head + "    dtype: int8\n",
                {"field pipelines.p.dtype: expected one of uint8, float32, float16, got 'int8'"});
  ExpectRefused(head + "    layout: chw\n",
                {"field pipelines.p.layout: expected one of nchw, nhwc"});
  ExpectRefused(head + "    augment: random\n",
                {"field pipelines.p.augment: expected one of train, eval"});
  ExpectRefused(head + "    error_policy: ignore\n",
                {"field pipelines.p.error_policy: expected one of skip, fail_fast"});
  ExpectRefused("log_level: loud\n" + std::string(kMinimal),
                {"field log_level: unknown log level 'loud'"});
}

TEST_CASE("cache_output: eval pipelines only, with a bound", "[config][output_cache]") {
  const std::string head = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  absl::StatusOr<DaemonConfig> c =
      Parse(head + "    augment: eval\n    cache_output: true\n    cache_output_bytes: 2GiB\n");
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].config.cache_output);
  CHECK(c->pipelines[0].config.cache_output_bytes == uint64_t{2} << 30);
  c = Parse(head + "    augment: eval\n    cache_output: true\n");
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].config.cache_output_bytes == uint64_t{1} << 30);
  c = Parse(head);
  REQUIRE(c.ok());
  CHECK_FALSE(c->pipelines[0].config.cache_output);
  ExpectRefused(head + "    augment: train\n    cache_output: true\n",
                {"field pipelines.p.cache_output: refused: this pipeline draws random numbers "
                 "(augment: train draws a random crop and flip)"});
  ExpectRefused(head + "    cache_output: true\n", {"field pipelines.p.cache_output: refused"});
  ExpectRefused(head +
                    "    kind: video\n    augment: eval\n    clip_start: random\n"
                    "    cache_output: true\n",
                {"field pipelines.p.cache_output: refused", "clip_start: random"});
  ExpectRefused(head + "    augment: eval\n    cache_output_bytes: 1GiB\n",
                {"field pipelines.p.cache_output_bytes: is only for `cache_output: true`"});
  ExpectRefused(head + "    augment: eval\n    cache_output: true\n    cache_output_bytes: 0\n",
                {"field pipelines.p.cache_output_bytes"});
}

TEST_CASE("negative and out-of-range numbers are refused", "[config]") {
  const std::string head = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  ExpectRefused("threads: -1\n" + std::string(kMinimal), {"field threads: must not be negative"});
  ExpectRefused("threads: 5000\n" + std::string(kMinimal),
                {"field threads: must be within [0, 1024]"});
  ExpectRefused("max_streams: 0\n" + std::string(kMinimal),
                {"field max_streams: must be within [1,"});
  ExpectRefused(head + "    max_file_bytes: -5MiB\n",
                {"field pipelines.p.max_file_bytes: size must not be negative"});
  ExpectRefused("engine: {fetch_queue_bytes: 0}\n" + std::string(kMinimal),
                {"field engine.fetch_queue_bytes: must be at least 1 bytes"});
  ExpectRefused(head + "    max_decode_memory: 4KiB\n",
                {"field pipelines.p.max_decode_memory: must be at least 1048576 bytes"});
  ExpectRefused(head + "    max_decode_memory: -1MiB\n",
                {"field pipelines.p.max_decode_memory: size must not be negative"});
  ExpectRefused(head + "    max_decode_seconds: 0\n",
                {"field pipelines.p.max_decode_seconds: must be within [0.001, 3600]"});
  ExpectRefused(head + "    max_decode_seconds: 7200\n",
                {"field pipelines.p.max_decode_seconds: must be within [0.001, 3600]"});
  ExpectRefused(head + "    max_batch_size: -4\n",
                {"field pipelines.p.max_batch_size: must not be negative"});
  ExpectRefused(head + "    max_batch_size: 0\n",
                {"field pipelines.p.max_batch_size: must be within [1, 65536]"});
  ExpectRefused(head + "    size: 0\n", {"field pipelines.p.size: must be within [1, 16384]"});
  ExpectRefused(head + "    flip_probability: 1.5\n",
                {"field pipelines.p.flip_probability: must be within [0, 1]"});
  ExpectRefused(head + "    max_failure_rate: -0.1\n", {"field pipelines.p.max_failure_rate"});
  ExpectRefused(head + "    scale: [0.9, 0.2]\n",
                {"field pipelines.p.scale: min must not exceed max"});
  ExpectRefused(head + "    std: [0.2, 0, 0.2]\n", {"field pipelines.p.std[1]: must be within"});
  ExpectRefused(head + "    augment: eval\n    size: 300\n    resize_size: 256\n",
                {"field pipelines.p.resize_size: must be at least the output size"});
  ExpectRefused(head + "    size: 64\n    height: 32\n",
                {"field pipelines.p.size: give either `size` or `height`/`width`"});
}

TEST_CASE("a pipeline without a dataset is refused", "[config]") {
  ExpectRefused("pipelines:\n  p:\n    augment: train\n", {"field pipelines.p: missing `dataset`"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {}\n", {"field pipelines.p.dataset: needs `root`"});
  ExpectRefused("pipelines:\n  p:\n", {"field pipelines.p: expected a map, got nothing"});
  ExpectRefused("threads: 2\n", {"field pipelines: no pipelines defined"});
  ExpectRefused("pipelines: {}\n", {"field pipelines: no pipelines defined"});
}

TEST_CASE("dataset roots must lie under the allowed roots", "[config]") {
  CHECK(Parse("allowed_roots: [/data]\npipelines:\n  p: {dataset: {root: /data/imagenet}}\n").ok());
  CHECK(Parse("allowed_roots: [/data]\npipelines:\n  p: {dataset: {root: /data}}\n").ok());
  ExpectRefused(
      "allowed_roots: [/data]\npipelines:\n  p: {dataset: {root: /database/x}}\n",
      {"field pipelines.p.dataset.root: '/database/x'", "outside the allowed roots [/data]"});
  ExpectRefused("allowed_roots: [/data]\npipelines:\n  p: {dataset: {root: /data/../etc}}\n",
                {"field pipelines.p.dataset.root: '/etc'", "outside the allowed roots"});
  ExpectRefused("allowed_roots: [/data]\npipelines:\n  p: {dataset: {list: /etc/list.txt}}\n",
                {"field pipelines.p.dataset.list: '/etc/list.txt'", "outside the allowed roots"});
  ExpectRefused(
      "allowed_roots: [/data]\npipelines:\n  p: {dataset: {list: /data/l.txt, root: /srv}}\n",
      {"field pipelines.p.dataset.root: '/srv'", "outside the allowed roots"});
}

TEST_CASE("a symlink cannot lead a dataset out of the allowed roots", "[config]") {
  TempDir dir;
  fs::create_directories(dir.Sub("allowed"));
  fs::create_directories(dir.Sub("secret/class"));
  fs::create_directory_symlink(dir.Sub("secret"), dir.Sub("allowed/link"));
  // The parse takes the path as written (inside the allowed root); the
  // loading step resolves the link and refuses it, naming the field.
  absl::StatusOr<DaemonConfig> c = Parse(
      "allowed_roots: [allowed]\npipelines:\n  p: {dataset: {root: allowed/link}}\n", dir.path());
  REQUIRE(c.ok());
  for (const absl::Status& st : {CheckAllowedRoots(*c), LoadPipelines(*c).status()}) {
    REQUIRE_FALSE(st.ok());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    const std::string msg(st.message());
    INFO(msg);
    CHECK(msg.find("test.yaml: field pipelines.p.dataset.root: '" + dir.Sub("allowed/link") +
                   "' (really '" + dir.Sub("secret") + "') lies outside the allowed roots") == 0);
  }
  // A link that stays inside the allowed roots is fine.
  fs::create_directories(dir.Sub("allowed/real/class"));
  fs::create_directory_symlink(dir.Sub("allowed/real"), dir.Sub("allowed/inside"));
  c = Parse("allowed_roots: [allowed]\npipelines:\n  p: {dataset: {root: allowed/inside}}\n",
            dir.path());
  REQUIRE(c.ok());
  CHECK(CheckAllowedRoots(*c).ok());
}

TEST_CASE("parsing touches no file system; loading checks the disk and names the field",
          "[config]") {
  TempDir dir;
  const std::string gone = dir.Sub("not-yet");  // nothing exists below it
  const std::string yaml = "allowed_roots: [" + gone + "]\n" +
                           "pipelines:\n"
                           "  folder: {dataset: {root: " +
                           gone +
                           "/train}}\n"
                           "  listed: {dataset: {list: " +
                           gone + "/list.txt}}\n";
  absl::StatusOr<DaemonConfig> c =
      ParseConfig(yaml, "test.yaml", dir.Sub("no/such/base"), kMachine);
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].dataset.root == gone + "/train");
  CHECK(c->pipelines[1].dataset.list == gone + "/list.txt");
  CHECK_FALSE(fs::exists(gone));
  CHECK(CheckAllowedRoots(*c).ok());  // nothing to resolve: the paths as written

  absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> p = LoadPipelines(*c);
  REQUIRE_FALSE(p.ok());
  std::string msg(p.status().message());
  INFO(msg);
  CHECK(msg.find("test.yaml: field pipelines.folder.dataset.root: ") == 0);

  // Once the folder exists, the next missing piece is named.
  dir.Write("not-yet/train/cat/1.jpg");
  p = LoadPipelines(*c);
  REQUIRE_FALSE(p.ok());
  msg = std::string(p.status().message());
  CHECK(msg.find("test.yaml: field pipelines.listed.dataset.list: ") == 0);
  dir.Write("not-yet/list.txt", "train/cat/1.jpg\t0\n");
  p = LoadPipelines(*c);
  REQUIRE(p.ok());
  CHECK((*p)[1]->dataset->size() == 1);
}

TEST_CASE("the parse refuses a relative base folder", "[config]") {
  absl::StatusOr<DaemonConfig> c = ParseConfig(kMinimal, "test.yaml", "etc", kMachine);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(c.status().message()).find("must be absolute") != std::string::npos);
}

TEST_CASE("memory defaults and N% sizes are taken of the SystemInfo given", "[config]") {
  SystemInfo machine{8 * kGiB, 0};
  CHECK(machine.MemoryLimit() == 8 * kGiB);
  CHECK(DefaultMemoryBudget(machine) == 2 * kGiB);
  absl::StatusOr<DaemonConfig> c =
      ParseConfig("memory_budget: 25%\n" + std::string(kMinimal), "t.yaml", "/", machine);
  REQUIRE(c.ok());
  CHECK(c->memory_budget == 2 * kGiB);
  CHECK(c->system.physical_memory == 8 * kGiB);

  // A container: the cgroup's lower limit is what counts.
  SystemInfo container{8 * kGiB, 2 * kGiB};
  CHECK(container.MemoryLimit() == 2 * kGiB);
  CHECK(DefaultMemoryBudget(container) == kGiB / 2);
  c = ParseConfig("memory_budget: 50%\n" + std::string(kMinimal), "t.yaml", "/", container);
  REQUIRE(c.ok());
  CHECK(c->memory_budget == kGiB);
  c = ParseConfig(kMinimal, "t.yaml", "/", container);
  REQUIRE(c.ok());
  CHECK(c->memory_budget == kGiB / 2);
  // A cgroup limit above physical memory ("no limit" in cgroup v1) is ignored.
  CHECK(SystemInfo{8 * kGiB, uint64_t{1} << 62}.MemoryLimit() == 8 * kGiB);

  // Clamped to [256 MiB, 16 GiB].
  CHECK(DefaultMemoryBudget(SystemInfo{kGiB / 2, 0}) == (256u << 20));
  CHECK(DefaultMemoryBudget(SystemInfo{1024 * kGiB, 0}) == 16 * kGiB);

  // --memory-budget N% is taken of the same machine.
  const char* argv[] = {"conveyord", "--memory-budget", "75%"};
  absl::StatusOr<Flags> f = ParseFlags(3, argv);
  REQUIRE(f.ok());
  REQUIRE(ApplyFlags(*f, &*c).ok());
  CHECK(c->memory_budget == 3 * kGiB / 2);
}

TEST_CASE("duplicate pipeline names and fields are refused", "[config]") {
  ExpectRefused(R"(
pipelines:
  imagenet:
    dataset: {root: /a}
  imagenet:
    dataset: {root: /b}
)",
                {"field pipelines.imagenet: duplicate pipeline name"});
  ExpectRefused("threads: 1\nthreads: 2\n" + std::string(kMinimal), {"field threads: given twice"});
  ExpectRefused("pipelines:\n  'bad name!': {dataset: {root: /a}}\n",
                {"field pipelines.bad name!: a pipeline name is"});
}

TEST_CASE("memory sizes parse with units and refuse bad strings", "[config]") {
  CHECK(*ParseByteSize("123") == 123);
  CHECK(*ParseByteSize("2GiB") == (2ull << 30));
  CHECK(*ParseByteSize("2G") == (2ull << 30));
  CHECK(*ParseByteSize("512 MiB") == (512ull << 20));
  CHECK(*ParseByteSize("1.5KiB") == 1536);
  CHECK(*ParseByteSize("10MB") == 10000000);
  CHECK(*ParseByteSize("4kb") == 4000);
  CHECK(*ParseByteSizeOrPercent("50%", 1000) == 500);
  CHECK(*ParseByteSizeOrPercent("2GiB", 1000) == (2ull << 30));
  CHECK_FALSE(ParseByteSize("50%").ok());
  CHECK(ParseByteSize("50%").status().message() == "a percentage is not allowed here: '50%'");
  CHECK(std::string(ParseByteSize("1XB").status().message()).find("N%") == std::string::npos);
  CHECK(std::string(ParseByteSizeOrPercent("1XB", 1).status().message()).find(", or N%") !=
        std::string::npos);
  CHECK_FALSE(ParseByteSizeOrPercent("0%", 1000).ok());
  CHECK_FALSE(ParseByteSizeOrPercent("101%", 1000).ok());
  CHECK_FALSE(ParseByteSize("").ok());
  CHECK_FALSE(ParseByteSize("GiB").ok());
  CHECK_FALSE(ParseByteSize("-1GiB").ok());
  CHECK_FALSE(ParseByteSize("1e400").ok());
  CHECK_FALSE(ParseByteSize("99999999999TiB").ok());
  absl::StatusOr<DaemonConfig> c = Parse("memory_budget: 25%\n" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->memory_budget > 0);
  ExpectRefused("memory_budget: 2XB\n" + std::string(kMinimal),
                {"field memory_budget: unknown unit 'XB'"});
  ExpectRefused("memory_budget: lots\n" + std::string(kMinimal),
                {"field memory_budget: expected a size such as 512MiB"});
  ExpectRefused("memory_budget: -2GiB\n" + std::string(kMinimal),
                {"field memory_budget: size must not be negative"});
  ExpectRefused("memory_budget: 1KiB\n" + std::string(kMinimal),
                {"field memory_budget: must be at least 1048576 bytes"});
  ExpectRefused("memory_budget: 150%\n" + std::string(kMinimal),
                {"field memory_budget: percentage must be within"});
  ExpectRefused("pipelines:\n  p: {dataset: {root: /a}, max_file_bytes: 10%}\n",
                {"field pipelines.p.max_file_bytes: a percentage is not allowed here"});
}

TEST_CASE("listen settings are checked", "[config]") {
  ExpectRefused("listen: {unix_mode: '0666'}\n" + std::string(kMinimal),
                {"field listen.unix_mode", "must not grant access to others"});
  ExpectRefused("listen: {unix_mode: rw}\n" + std::string(kMinimal),
                {"field listen.unix_mode: expected an octal file mode"});
  ExpectRefused("listen: {tcp: localhost}\n" + std::string(kMinimal),
                {"field listen.tcp: expected host:port"});
  ExpectRefused("listen: {tcp: 'localhost:99999'}\n" + std::string(kMinimal),
                {"field listen.tcp: port of 'localhost:99999'"});
  ExpectRefused("listen: {tcp: '0.0.0.0:7070', data_tcp: 7071}\n" + std::string(kMinimal),
                {"field listen.data_tcp: expected host:port"});
  ExpectRefused("listen: {unix: '', tcp: ''}\n" + std::string(kMinimal),
                {"field listen: needs a unix socket, a TCP address or both"});
  ExpectRefused("listen: {unix: /" + std::string(120, 'x') + "}\n" + std::string(kMinimal),
                {"field listen.unix", "too long"});
  absl::StatusOr<DaemonConfig> c =
      Parse("listen: {unix: '', tcp: '[::1]:7070'}\n" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->listen.unix_path.empty());
}

const char kTwoPipelines[] = R"(
pipelines:
  a: {dataset: {root: /data/a}}
  b: {dataset: {root: /data/b}}
)";

TEST_CASE("access tokens are parsed and checked", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
access:
  tokens:
    - {name: trainer, file: tokens/trainer, pipelines: [a]}
    - {name: ops, file: /etc/conveyor/ops, operator: true}
  require_token_on_unix: true
)" + std::string(kTwoPipelines));
  REQUIRE(c.ok());
  REQUIRE(c->access.tokens.size() == 2);
  CHECK(c->access.tokens[0].name == "trainer");
  CHECK(c->access.tokens[0].file == "/etc/tokens/trainer");  // relative to the config's folder
  REQUIRE(c->access.tokens[0].pipelines.has_value());
  CHECK(*c->access.tokens[0].pipelines == std::set<std::string>{"a"});
  CHECK_FALSE(c->access.tokens[0].is_operator);
  CHECK_FALSE(c->access.tokens[1].pipelines.has_value());  // all pipelines
  CHECK(c->access.tokens[1].is_operator);
  CHECK(c->access.require_token_on_unix);

  absl::StatusOr<DaemonConfig> none = Parse(kTwoPipelines);
  REQUIRE(none.ok());
  CHECK(none->access.tokens.empty());
  CHECK_FALSE(none->access.require_token_on_unix);

  ExpectRefused(
      "access: {tokens: [{name: t, file: /t, pipelines: [a, c]}]}\n" + std::string(kTwoPipelines),
      {"field access.tokens[0].pipelines[1]: no pipeline named 'c'"});
  ExpectRefused("access: {tokens: [{file: /t}]}\n" + std::string(kTwoPipelines),
                {"field access.tokens[0]: missing `name`"});
  ExpectRefused("access: {tokens: [{name: t}]}\n" + std::string(kTwoPipelines),
                {"field access.tokens[0]: missing `file`"});
  ExpectRefused("access: {tokens: [{name: 't x', file: /t}]}\n" + std::string(kTwoPipelines),
                {"field access.tokens[0].name: a token name is"});
  ExpectRefused(
      "access: {tokens: [{name: t, file: /t}, {name: t, file: /u}]}\n" + std::string(kTwoPipelines),
      {"field access.tokens[1].name: duplicate token name 't'"});
  ExpectRefused(
      "access: {tokens: [{name: t, file: /t}, {name: u, file: /t}]}\n" + std::string(kTwoPipelines),
      {"field access.tokens[1].file: '/t' is the file of another token too"});
  ExpectRefused("access: {tokens: [{name: t, file: /t, secret: x}]}\n" + std::string(kTwoPipelines),
                {"field access.tokens[0].secret: unknown field"});
  ExpectRefused("access: {tokens: {name: t}}\n" + std::string(kTwoPipelines),
                {"field access.tokens: expected a list"});
  ExpectRefused(
      "access: {tokens: [{name: t, file: /t, pipelines: a}]}\n" + std::string(kTwoPipelines),
      {"field access.tokens[0].pipelines: expected a list of pipeline names"});
  ExpectRefused(
      "access: {tokens: [{name: t, file: /t, operator: maybe}]}\n" + std::string(kTwoPipelines),
      {"field access.tokens[0].operator"});
  ExpectRefused("access: {require_token_on_unix: true}\n" + std::string(kTwoPipelines),
                {"field access.require_token_on_unix: needs access.tokens"});
}

TEST_CASE("listen.tls is parsed and checked", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
listen:
  tcp: 0.0.0.0:7070
  tls: {cert: tls/server.pem, key: /k/server.key, client_ca: ca.pem, require_client_cert: true,
        reload_interval_seconds: 5}
)" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->listen.tls.enabled());
  CHECK(c->listen.tls.cert == "/etc/tls/server.pem");
  CHECK(c->listen.tls.key == "/k/server.key");
  CHECK(c->listen.tls.client_ca == "/etc/ca.pem");
  CHECK(c->listen.tls.require_client_cert);
  CHECK(c->listen.tls.reload_interval_seconds == 5);
  CHECK_FALSE(Parse(kMinimal)->listen.tls.enabled());
  CHECK(Parse(kMinimal)->listen.tls.reload_interval_seconds == 60);
  ExpectRefused(
      "listen: {tcp: '127.0.0.1:1', tls: {cert: /c, key: /k, reload_interval_seconds: "
      "0}}\n" +
          std::string(kMinimal),
      {"field listen.tls.reload_interval_seconds"});

  ExpectRefused("listen: {tcp: '127.0.0.1:1', tls: {cert: /c}}\n" + std::string(kMinimal),
                {"field listen.tls: needs both `cert` and `key`"});
  ExpectRefused(
      "listen: {tcp: '127.0.0.1:1', tls: {cert: /c, key: /k, require_client_cert: "
      "true}}\n" +
          std::string(kMinimal),
      {"field listen.tls.require_client_cert: needs listen.tls.client_ca"});
  ExpectRefused(
      "listen: {tcp: '127.0.0.1:1', tls: {cert: /c, key: /k, ca: /a}}\n" + std::string(kMinimal),
      {"field listen.tls.ca: unknown field"});
  // Unused without TCP (the unix socket never uses TLS); --tcp may add it.
  CHECK(Parse("listen: {tls: {cert: /c, key: /k}}\n" + std::string(kMinimal)).ok());
  // The data socket speaks TLS too: an explicit data_tcp is fine, and the
  // default (the TCP host, a free port) applies.
  {
    absl::StatusOr<DaemonConfig> c =
        Parse("listen: {tcp: '127.0.0.1:1', data_tcp: '127.0.0.1:2', tls: {cert: /c, key: /k}}\n" +
              std::string(kMinimal));
    REQUIRE(c.ok());
    CHECK(DataSocketAddress(c->listen) == "127.0.0.1:2");
    c = Parse("listen: {tcp: '127.0.0.1:1', tls: {cert: /c, key: /k}}\n" + std::string(kMinimal));
    REQUIRE(c.ok());
    CHECK(DataSocketAddress(c->listen) == "127.0.0.1:0");
  }
  CHECK(Parse("listen: {tcp: '127.0.0.1:1', data_tcp: none, tls: {cert: /c, key: /k}}\n" +
              std::string(kMinimal))
            .ok());
}

TEST_CASE("TCP off loopback needs TLS, tokens or allow_insecure_tcp", "[config]") {
  for (const char* addr : {"0.0.0.0:7070", "[::]:7070", "10.1.2.3:7070", "example.com:7070",
                           "127.0.0.1.example.com:7070"}) {
    ExpectRefused(absl::StrCat("listen: {tcp: '", addr, "'}\n", kMinimal),
                  {"field listen.tcp: '", addr, "' is not a loopback address",
                   "listen.allow_insecure_tcp: true"});
  }
  for (const char* addr :
       {"127.0.0.1:7070", "127.3.4.5:0", "[::1]:7070", "localhost:7070", "LOCALHOST:1"}) {
    INFO(addr);
    CHECK(Parse(absl::StrCat("listen: {tcp: '", addr, "'}\n", kMinimal)).ok());
  }
  absl::StatusOr<DaemonConfig> insecure =
      Parse("listen: {tcp: '0.0.0.0:7070', allow_insecure_tcp: true}\n" + std::string(kMinimal));
  REQUIRE(insecure.ok());
  CHECK(insecure->listen.allow_insecure_tcp);
  CHECK(Parse("listen: {tcp: '0.0.0.0:7070', tls: {cert: /c, key: /k}}\n" + std::string(kMinimal))
            .ok());
  CHECK(Parse("listen: {tcp: '0.0.0.0:7070'}\naccess: {tokens: [{name: t, file: /t}]}\n" +
              std::string(kMinimal))
            .ok());
  ExpectRefused("listen: {tcp: '0.0.0.0:1', allow_insecure_tcp: 2}\n" + std::string(kMinimal),
                {"field listen.allow_insecure_tcp"});
  // --tcp on the command line is held to the same rule.
  absl::StatusOr<DaemonConfig> c = Parse(kMinimal);
  REQUIRE(c.ok());
  const char* argv[] = {"conveyord", "--tcp", "0.0.0.0:0"};
  absl::StatusOr<Flags> f = ParseFlags(3, argv);
  REQUIRE(f.ok());
  const absl::Status st = ApplyFlags(*f, &*c);
  CHECK(st.message().find("field listen.tcp: '0.0.0.0:0' is not a loopback address") !=
        std::string::npos);
}

TEST_CASE("token files are read private, non-empty, without the newline", "[config]") {
  TempDir dir;
  auto write = [&](const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir.Write(name, content);
    REQUIRE(::chmod(path.c_str(), mode) == 0);
    return path;
  };
  const std::string good = write("good", "0123456789abcdef0123\n", 0600);
  absl::StatusOr<std::string> t = ReadTokenFile("access.tokens[0].file", good);
  REQUIRE(t.ok());
  CHECK(*t == "0123456789abcdef0123");
  CHECK(*ReadTokenFile("f", write("crlf", "0123456789abcdef0123\r\n", 0640)) ==
        "0123456789abcdef0123");

  auto refused = [&](const std::string& path, const std::string& why) {
    absl::StatusOr<std::string> r = ReadTokenFile("access.tokens[2].file", path);
    REQUIRE_FALSE(r.ok());
    const std::string msg(r.status().message());
    INFO(msg);
    CHECK(msg.find("field access.tokens[2].file: ") == 0);
    CHECK(msg.find(why) != std::string::npos);
    CHECK(msg.find("secret-secret-secret") == std::string::npos);  // never the content
  };
  refused(write("world", "secret-secret-secret\n", 0604), "may be read or written by others");
  refused(write("empty", "\n", 0600), "is empty");
  refused(write("short", "secret\n", 0600), "at least 16 are needed");
  refused(write("space", "secret-secret-secret x\n", 0600), "holds a space");
  refused(write("lines", "secret-secret-secret\nsecond\n", 0600), "control character");
  refused(dir.Sub("missing"), "open '" + dir.Sub("missing") + "'");
  refused(dir.path(), "is not a regular file");
}

TEST_CASE("YAML syntax errors name the file and line", "[config]") {
  ExpectRefused("pipelines:\n  p: {dataset: [\n", {"test.yaml:", "YAML syntax error"});
}

TEST_CASE("datasets load once and are shared across pipelines", "[config]") {
  TempDir dir;
  dir.Write("data/train/cat/1.jpg");
  dir.Write("data/train/cat/2.jpg");
  dir.Write("data/train/dog/3.jpg");
  dir.Write("data/list.txt", "cat/1.jpg\t0\ndog/3.jpg\t1\n");
  const std::string config = dir.Write("conf/conveyord.yaml", R"(
allowed_roots: [../data]
pipelines:
  train: {dataset: {root: ../data/train}, augment: train}
  eval: {dataset: {root: ../data/train/}, augment: eval, size: 64}
  listed: {dataset: {list: ../data/list.txt, root: ../data/train}}
)");
  absl::StatusOr<DaemonConfig> c = LoadConfigFile(config, kMachine);
  REQUIRE(c.ok());
  absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> p = LoadPipelines(*c);
  REQUIRE(p.ok());
  REQUIRE(p->size() == 3);
  CHECK((*p)[0]->name == "train");
  CHECK((*p)[0]->dataset->size() == 3);
  CHECK((*p)[0]->dataset.get() == (*p)[1]->dataset.get());  // one index for both
  CHECK((*p)[2]->dataset.get() != (*p)[0]->dataset.get());
  CHECK((*p)[2]->dataset->size() == 2);
  CHECK((*p)[1]->transform.output_height == 64);
}

TEST_CASE("a dataset that cannot be loaded is refused naming the field", "[config]") {
  TempDir dir;
  const std::string config =
      dir.Write("conveyord.yaml", "pipelines:\n  p: {dataset: {root: missing}}\n");
  absl::StatusOr<DaemonConfig> c = LoadConfigFile(config, kMachine);
  REQUIRE(c.ok());
  absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> p = LoadPipelines(*c);
  REQUIRE_FALSE(p.ok());
  const std::string msg(p.status().message());
  INFO(msg);
  CHECK(msg.find(config + ": field pipelines.p.dataset.root: ") == 0);
  absl::StatusOr<DaemonConfig> missing = LoadConfigFile(dir.Sub("nope.yaml"), kMachine);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message())
            .find(dir.Sub("nope.yaml") + ": cannot read the config file: ") == 0);
}

TEST_CASE("the data socket listens beside TCP unless turned off", "[config]") {
  ListenConfig l;
  CHECK(DataSocketAddress(l).empty());  // no TCP listener, no data socket
  l.tcp = "0.0.0.0:7070";
  CHECK(DataSocketAddress(l) == "0.0.0.0:0");
  l.tcp = "[::]:7070";
  CHECK(DataSocketAddress(l) == "[::]:0");
  l.data_tcp = "0.0.0.0:7071";
  CHECK(DataSocketAddress(l) == "0.0.0.0:7071");
  l.data_tcp = "none";
  CHECK(DataSocketAddress(l).empty());

  absl::StatusOr<DaemonConfig> c =
      Parse("listen: {tcp: '0.0.0.0:7070', data_tcp: '0.0.0.0:7071', allow_insecure_tcp: true}\n" +
            std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->listen.data_tcp == "0.0.0.0:7071");
  const char* argv[] = {"conveyord", "--data-tcp", "none"};
  absl::StatusOr<Flags> f = ParseFlags(3, argv);
  REQUIRE(f.ok());
  REQUIRE(ApplyFlags(*f, &*c).ok());
  CHECK(DataSocketAddress(c->listen).empty());
}

TEST_CASE("command-line flags override the config", "[config]") {
  const char* argv[] = {"conveyord",       "--config",    "/x.yaml",       "--socket=/tmp/c.sock",
                        "--tcp",           "127.0.0.1:0", "--threads",     "3",
                        "--memory-budget", "64MiB",       "--log-level",   "warn",
                        "--port-file",     "/tmp/port",   "--check-config"};
  absl::StatusOr<Flags> f = ParseFlags(static_cast<int>(std::size(argv)), argv);
  REQUIRE(f.ok());
  CHECK(f->config == "/x.yaml");
  CHECK(f->check_config);
  CHECK(f->port_file == "/tmp/port");
  absl::StatusOr<DaemonConfig> c = Parse(kMinimal);
  REQUIRE(c.ok());
  REQUIRE(ApplyFlags(*f, &*c).ok());
  CHECK(c->listen.unix_path == "/tmp/c.sock");
  CHECK(c->listen.tcp == "127.0.0.1:0");
  CHECK(c->engine.num_threads == 3);
  CHECK(c->memory_budget == (64u << 20));
  CHECK(c->log_level == "warn");

  CHECK_FALSE(f->no_data);
  const char* schema_only[] = {"conveyord", "--check-config", "--no-data"};
  absl::StatusOr<Flags> schema = ParseFlags(3, schema_only);
  REQUIRE(schema.ok());
  CHECK((schema->check_config && schema->no_data));
  const char* no_data_alone[] = {"conveyord", "--no-data"};
  absl::StatusOr<Flags> alone = ParseFlags(2, no_data_alone);
  REQUIRE_FALSE(alone.ok());
  CHECK(std::string(alone.status().message()) == "--no-data: only with --check-config");

  const char* prepare[] = {"conveyord", "--prepare=train"};
  absl::StatusOr<Flags> p = ParseFlags(2, prepare);
  REQUIRE(p.ok());
  CHECK(p->prepare == "train");
  const char* prepare_and_check[] = {"conveyord", "--prepare", "train", "--check-config"};
  absl::StatusOr<Flags> pc = ParseFlags(4, prepare_and_check);
  REQUIRE_FALSE(pc.ok());
  CHECK(std::string(pc.status().message()) == "--prepare: not with --check-config or --probe");
  const char* prepare_empty[] = {"conveyord", "--prepare="};
  CHECK_FALSE(ParseFlags(2, prepare_empty).ok());

  const char* bad_flag[] = {"conveyord", "--frobnicate"};
  CHECK_FALSE(ParseFlags(2, bad_flag).ok());
  const char* no_value[] = {"conveyord", "--threads"};
  CHECK_FALSE(ParseFlags(2, no_value).ok());

  Flags bad_budget;
  bad_budget.memory_budget = "-1GiB";
  absl::Status st = ApplyFlags(bad_budget, &*c);
  CHECK(std::string(st.message()).find("--memory-budget: size must not be negative") == 0);
  Flags bad_threads;
  bad_threads.threads = "x";
  CHECK(std::string(ApplyFlags(bad_threads, &*c).message()).find("--threads:") == 0);
  Flags port_without_tcp;
  port_without_tcp.port_file = "/tmp/p";
  port_without_tcp.tcp = "none";
  CHECK(std::string(ApplyFlags(port_without_tcp, &*c).message()).find("--port-file:") == 0);
}

TEST_CASE("the cgroup memory limit is read from v2 and v1 hierarchies", "[config]") {
  {
    TempDir fs_root;  // no /proc/self/cgroup at all
    CHECK(CgroupMemoryLimit(fs_root.path()) == 0);
  }
  {
    TempDir r;  // cgroup v2 with a limit
    r.Write("proc/self/cgroup", "0::/system.slice/job.scope\n");
    r.Write("sys/fs/cgroup/system.slice/job.scope/memory.max", "1073741824\n");
    CHECK(CgroupMemoryLimit(r.path()) == kGiB);
  }
  {
    TempDir r;  // cgroup v2 without one
    r.Write("proc/self/cgroup", "0::/user.slice\n");
    r.Write("sys/fs/cgroup/user.slice/memory.max", "max\n");
    CHECK(CgroupMemoryLimit(r.path()) == 0);
  }
  {
    TempDir r;  // cgroup v1, the process's own memory cgroup
    r.Write("proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n");
    r.Write("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "536870912\n");
    CHECK(CgroupMemoryLimit(r.path()) == (512u << 20));
  }
  {
    TempDir r;  // cgroup v1 inside a cgroup namespace: the path is hidden
    r.Write("proc/self/cgroup", "5:memory:/docker/abc\n");
    r.Write("sys/fs/cgroup/memory/memory.limit_in_bytes", "268435456\n");
    CHECK(CgroupMemoryLimit(r.path()) == (256u << 20));
  }
  const SystemInfo here = ProbeSystemInfo();
  CHECK(here.physical_memory > 0);
  CHECK(here.MemoryLimit() > 0);
  CHECK(here.MemoryLimit() <= here.physical_memory);
}

TEST_CASE("the cgroup CPU quota is read from v2 (tightest ancestor) and v1", "[config]") {
  {
    TempDir fs_root;  // no /proc/self/cgroup at all
    CHECK(CgroupCpuQuota(fs_root.path()) == 0);
  }
  {
    TempDir r;  // v2: the job's own cpu.max is "max", its parent allows 1.5 CPUs
    r.Write("proc/self/cgroup", "0::/kubepods/pod1/job\n");
    r.Write("sys/fs/cgroup/kubepods/pod1/job/cpu.max", "max 100000\n");
    r.Write("sys/fs/cgroup/kubepods/pod1/cpu.max", "150000 100000\n");
    r.Write("sys/fs/cgroup/kubepods/cpu.max", "800000 100000\n");
    CHECK(CgroupCpuQuota(r.path()) == Approx(1.5));
  }
  {
    TempDir r;  // v2 without any quota
    r.Write("proc/self/cgroup", "0::/user.slice\n");
    r.Write("sys/fs/cgroup/user.slice/cpu.max", "max 100000\n");
    CHECK(CgroupCpuQuota(r.path()) == 0);
  }
  {
    TempDir r;  // v1: the cpu controller mounted with cpuacct
    r.Write("proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n5:memory:/docker/abc\n");
    r.Write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
    r.Write("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    CHECK(CgroupCpuQuota(r.path()) == Approx(2.0));
  }
  {
    TempDir r;  // v1 without a quota
    r.Write("proc/self/cgroup", "4:cpu,cpuacct:/\n");
    r.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
    r.Write("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
    CHECK(CgroupCpuQuota(r.path()) == 0);
  }
}

TEST_CASE("threads: 0 counts the CPUs of the affinity mask, lowered to the quota", "[config]") {
  std::string source;
  CHECK(UsableCpus(16, 0, 64, &source) == 16);
  CHECK(source == "affinity mask: 16 CPUs");
  CHECK(UsableCpus(16, 1.5, 64, &source) == 2);
  CHECK(source == "affinity mask: 16 CPUs; cgroup CPU quota: 1.50 CPUs");
  CHECK(UsableCpus(2, 8, 64, &source) == 2);
  CHECK(UsableCpus(4, 0.2, 64, &source) == 1);
  CHECK(UsableCpus(0, 3, 64, &source) == 3);
  CHECK(UsableCpus(0, 0, 64, &source) == 64);
  CHECK(source.find("no affinity mask or quota") != std::string::npos);
  // This process: as many as its mask holds, never more than the machine.
  const int here = AffinityCpuCount();
  CHECK(here >= 1);
  CHECK(here <= static_cast<int>(std::thread::hardware_concurrency()));
}

TEST_CASE("YamlFields reads typed fields and names field and line", "[config]") {
  const YamlFields f("f.yaml", "/base");
  const YAML::Node root = YAML::Load("a: 7\nb: -3\nc: [1, 2]\nd: Yes\ne: NHWC\nf: 10%\n");
  uint64_t u = 0;
  REQUIRE(f.ReadUint(root["a"], "a", 1, 10, &u).ok());
  CHECK(u == 7);
  absl::Status st = f.ReadUint(root["a"], "a", 8, 10, &u);
  CHECK(st.message() == "f.yaml: field a: must be within [8, 10], got 7 (line 1)");
  st = f.ReadUint(root["b"], "x.b", 0, 10, &u);
  CHECK(st.message() == "f.yaml: field x.b: must not be negative, got -3 (line 2)");
  st = f.ReadUint(root["c"], "c", 0, 10, &u);
  CHECK(st.message() == "f.yaml: field c: expected an integer, got a list (line 3)");
  std::vector<double> v;
  REQUIRE(f.ReadNumbers(root["c"], "c", 2, 0, 5, &v).ok());
  CHECK(v == std::vector<double>{1, 2});
  CHECK(f.ReadNumbers(root["c"], "c", 3, 0, 5, &v).message() ==
        "f.yaml: field c: expected a list of 3 numbers, got 2 items (line 3)");
  bool b = false;
  REQUIRE(f.ReadBool(root["d"], "d", &b).ok());
  CHECK(b);
  int e = -1;
  REQUIRE(f.ReadEnum(root["e"], "e", {"nchw", "nhwc"}, &e).ok());
  CHECK(e == 1);
  uint64_t size = 0;
  REQUIRE(f.ReadSize(root["f"], "f", 1, 1000, &size).ok());
  CHECK(size == 100);
  CHECK(f.ReadSize(root["f"], "f", 1, 0, &size).message() ==
        "f.yaml: field f: a percentage is not allowed here: '10%' (line 6)");
  CHECK(f.CheckMap(root, "", {"a", "b", "c", "d", "e"}).message() ==
        "f.yaml: field f: unknown field (known: a, b, c, d, e) (line 6)");
  CHECK(f.CheckMap(YAML::Load("a: 1\na: 2\n"), "top", {"a"}).message() ==
        "f.yaml: field top.a: given twice (line 2)");
  // A null value is "nothing".
  CHECK(f.ReadUint(YAML::Load("~"), "zz", 0, 1, &u).message() ==
        "f.yaml: field zz: expected an integer, got nothing (line 1)");
}

TEST_CASE("paths resolve lexically against the base folder", "[config]") {
  CHECK(ResolvePath("/base", "data/x/") == "/base/data/x");
  CHECK(ResolvePath("/base", "../data") == "/data");
  CHECK(ResolvePath("/base", "/abs/./y/../z") == "/abs/z");
  CHECK(ResolvePath("/", "/") == "/");
  const YamlFields f("f.yaml", "/srv/conf");
  std::string p;
  REQUIRE(f.ReadPath(YAML::Load("../images"), "root", &p).ok());
  CHECK(p == "/srv/images");
  CHECK(f.ReadPath(YAML::Load("''"), "root", &p).message() ==
        "f.yaml: field root: must not be empty (line 1)");
}

#endif  // CONVEYOR_HAVE_SERVER

TEST_CASE("unix access lists and the stream idle timeout are read and checked", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
listen:
  allowed_uids: [1000, trainer]
  allowed_gids: [ml]
  operator_uids: [2000]
  operator_gids: [adm, "4"]
stream_idle_timeout_seconds: 30
)" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->listen.allowed_uids == std::vector<std::string>{"1000", "trainer"});
  CHECK(c->listen.allowed_gids == std::vector<std::string>{"ml"});
  CHECK(c->listen.operator_uids == std::vector<std::string>{"2000"});
  CHECK(c->listen.operator_gids == std::vector<std::string>{"adm", "4"});
  CHECK(c->stream_idle_timeout_seconds == 30);
  absl::StatusOr<DaemonConfig> d = Parse(kMinimal);
  REQUIRE(d.ok());
  CHECK(d->listen.allowed_uids.empty());
  CHECK(d->stream_idle_timeout_seconds == 300);

  ExpectRefused("listen: {allowed_uids: 1000}\n" + std::string(kMinimal),
                {"field listen.allowed_uids: expected a list of names or numbers"});
  ExpectRefused("listen: {operator_gids: [\"a b\"]}\n" + std::string(kMinimal),
                {"field listen.operator_gids[0]: expected a user or group name or number"});
  ExpectRefused("listen: {allowed_gids: [[1]]}\n" + std::string(kMinimal),
                {"field listen.allowed_gids[0]"});
  ExpectRefused("stream_idle_timeout_seconds: -1\n" + std::string(kMinimal),
                {"field stream_idle_timeout_seconds"});
}

TEST_CASE("per-client limits are read and checked", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(
      "per_client: {max_streams: 4, max_credits: 16, max_memory: 1GiB}\n" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->per_client.max_streams == 4);
  CHECK(c->per_client.max_credits == 16);
  CHECK(c->per_client.max_bytes == (1ull << 30));
  absl::StatusOr<DaemonConfig> d = Parse(kMinimal);
  REQUIRE(d.ok());
  CHECK(d->per_client.max_streams == 0);
  CHECK(d->per_client.max_credits == 0);
  CHECK(d->per_client.max_bytes == 0);
  ExpectRefused("per_client: {max_streams: -1}\n" + std::string(kMinimal),
                {"field per_client.max_streams"});
  ExpectRefused("per_client: {max_memory: lots}\n" + std::string(kMinimal),
                {"field per_client.max_memory"});
  ExpectRefused("per_client: {streams: 1}\n" + std::string(kMinimal),
                {"field per_client.streams: unknown field"});
}

TEST_CASE("metrics.listen: off by default; IP literals and a port", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(kMinimal);
  REQUIRE(c.ok());
  CHECK(c->metrics.listen.empty());
  CHECK(c->log_format == "text");
  c = Parse("metrics: {listen: \"127.0.0.1:9464\"}\nlog_format: json\n" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->metrics.listen == "127.0.0.1:9464");
  CHECK(c->log_format == "json");
  c = Parse("metrics: {listen: \"[::1]:0\"}\n" + std::string(kMinimal));
  REQUIRE(c.ok());
  CHECK(c->metrics.listen == "[::1]:0");
  c = Parse("metrics: {listen: \"0.0.0.0:9464\"}\n" + std::string(kMinimal));
  REQUIRE(c.ok());

  ExpectRefused("metrics: {listen: \"localhost:9464\"}\n" + std::string(kMinimal),
                {"field metrics.listen: expected IPV4:PORT or [IPV6]:PORT", "localhost:9464",
                 "host names are not resolved"});
  ExpectRefused("metrics: {listen: \"127.0.0.1\"}\n" + std::string(kMinimal),
                {"field metrics.listen: expected IPV4:PORT"});
  ExpectRefused("metrics: {listen: \"127.0.0.1:70000\"}\n" + std::string(kMinimal),
                {"field metrics.listen: port of '127.0.0.1:70000' must be an integer within"});
  ExpectRefused("metrics: {listen: \"::1:9464\"}\n" + std::string(kMinimal),
                {"field metrics.listen: expected IPV4:PORT or [IPV6]:PORT"});
  ExpectRefused("metrics: {listen: [1, 2]}\n" + std::string(kMinimal), {"field metrics.listen"});
  ExpectRefused("metrics: {port: 9464}\n" + std::string(kMinimal),
                {"field metrics.port: unknown field"});
  ExpectRefused("log_format: xml\n" + std::string(kMinimal),
                {"field log_format: unknown log format 'xml' (text or json)"});
}

TEST_CASE("dataset.shards: lists and brace patterns, label_key, shuffle_buffer") {
  auto c = Parse(
      "pipelines:\n  p:\n    dataset:\n      shards: data/t-{00..02}.tar\n"
      "      label_key: txt\n      shuffle_buffer: 64\n",
      "/srv");
  REQUIRE(c.ok());
  const DatasetSpec& d = c->pipelines[0].dataset;
  CHECK(d.kind == DatasetSpec::Kind::kTarShards);
  CHECK(d.shards ==
        std::vector<std::string>{"/srv/data/t-00.tar", "/srv/data/t-01.tar", "/srv/data/t-02.tar"});
  CHECK(d.label_key == "txt");
  CHECK(d.shuffle_buffer == 64);
  auto l = Parse("pipelines:\n  p:\n    dataset: {shards: [/a/x.tar, '/b/{0..1}.tar']}\n");
  REQUIRE(l.ok());
  CHECK(l->pipelines[0].dataset.shards ==
        std::vector<std::string>{"/a/x.tar", "/b/0.tar", "/b/1.tar"});
  CHECK(l->pipelines[0].dataset.label_key == "cls");
  CHECK(l->pipelines[0].dataset.shuffle_buffer == 1000);
  CHECK(DatasetPaths(l->pipelines[0]).size() == 3);
  CHECK(DatasetPaths(l->pipelines[0])[2].field == "pipelines.p.dataset.shards");
}

TEST_CASE("dataset.shards: URLs are remote shards, kept as written and outside allowed_roots") {
  auto c = Parse(
      "allowed_roots: [/data]\npipelines:\n  p:\n    dataset: {shards: "
      "'http://h:8080/s-{0..1}.tar'}\n");
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].dataset.shards ==
        std::vector<std::string>{"http://h:8080/s-0.tar", "http://h:8080/s-1.tar"});
  CHECK(DatasetPaths(c->pipelines[0]).empty());
  CHECK(IsRemoteShard("S3://bucket/k.tar"));
  CHECK_FALSE(IsRemoteShard("/data/http:/x.tar"));
}

TEST_CASE("dataset.shards: bad values are refused naming the field and the shard") {
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: ['https://h/s-0.tar', /d/a.tar]}\n",
                {"field pipelines.p.dataset.shards: mixes local and remote shards"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: 'http://'}\n",
                {"field pipelines.p.dataset.shards"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: '/d/{3..1}.tar'}\n",
                {"field pipelines.p.dataset.shards: pattern '/d/{3..1}.tar': range '{3..1}' is "
                 "reversed"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: ['/d/a.tar', '/d/{a,b}.tar']}\n",
                {"shard '/d/a.tar' is listed twice"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: []}\n", {"no shards listed"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: '/d/{0..9999999}.tar'}\n",
                {"expands to more than"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: /d/a.tar, root: /d}\n",
                {"give `shards` or `root`/`list`/`urls`, not both"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: /d/a.tar, label_key: 'a b'}\n",
                {"field pipelines.p.dataset.label_key: must be a member extension"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {shards: /d/a.tar, shuffle_buffer: -1}\n",
                {"field pipelines.p.dataset.shuffle_buffer"});
  ExpectRefused("pipelines:\n  p:\n    dataset: {root: /d, shuffle_buffer: 4}\n",
                {"field pipelines.p.dataset.shuffle_buffer: only for tar shards"});
  ExpectRefused(
      "allowed_roots: [/data]\npipelines:\n  p:\n    dataset: {shards: "
      "['/data/a.tar', '/mnt/b.tar']}\n",
      {"field pipelines.p.dataset.shards: '/mnt/b.tar' lies outside the allowed roots"});
}

TEST_CASE("video pipelines: kind video and its fields", "[config]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
pipelines:
  clips:
    dataset: {root: /data/videos}
    kind: video
    size: 112
    clip_frames: 8
    frame_stride: 4
    max_frames_decoded: 300
    max_duration_seconds: 600
    autorotate: false
  eval_clips:
    dataset: {root: /data/videos}
    kind: video
    augment: eval
    size: 112
    fps: 7.5
    layout: nhwc
)");
  REQUIRE(c.ok());
  const TransformSpec& t = c->pipelines[0].config.transform;
  CHECK(t.kind == MediaKind::kVideo);
  CHECK(t.video.clip_frames == 8);
  CHECK(t.video.frame_stride == 4);
  CHECK(t.video.fps == 0);
  CHECK(t.video.clip_start == ClipStart::kRandom);  // train's default
  CHECK(t.video.max_frames_decoded == 300);
  CHECK(t.video.max_duration_seconds == 600);
  CHECK_FALSE(t.video.autorotate);
  CHECK(SampleShape(t) == std::vector<int64_t>{8, 3, 112, 112});
  const TransformSpec& e = c->pipelines[1].config.transform;
  CHECK(e.video.clip_start == ClipStart::kCenter);  // eval's default
  CHECK(e.video.fps == 7.5);
  CHECK(e.video.clip_frames == VideoSpec{}.clip_frames);
  CHECK(e.video.autorotate);  // the default: clips as displayed
  CHECK(SampleShape(e) == std::vector<int64_t>{16, 112, 112, 3});

  const std::string head = "pipelines:\n  v:\n    dataset: {root: /data}\n";
  ExpectRefused(head + "    kind: movie\n", {"field pipelines.v.kind", "movie"});
  ExpectRefused(head + "    clip_frames: 8\n",
                {"field pipelines.v.clip_frames: is a video field; it needs `kind: video`"});
  ExpectRefused(head + "    kind: video\n    clip_frames: 0\n", {"field pipelines.v.clip_frames"});
  ExpectRefused(head + "    kind: video\n    frame_stride: 2\n    fps: 10\n",
                {"field pipelines.v.fps: give either `frame_stride` or `fps`, not both"});
  ExpectRefused(head + "    kind: video\n    fps: -1\n", {"field pipelines.v.fps"});
  ExpectRefused(head + "    kind: video\n    clip_start: middle\n",
                {"field pipelines.v.clip_start", "middle"});
  ExpectRefused(
      head + "    kind: video\n    clip_frames: 32\n    max_frames_decoded: 16\n",
      {"field pipelines.v.max_frames_decoded: must be at least clip_frames (32), got 16"});
  ExpectRefused(head + "    kind: video\n    max_duration_seconds: 0\n",
                {"field pipelines.v.max_duration_seconds"});
  ExpectRefused(head + "    kind: video\n    autorotate: sideways\n",
                {"field pipelines.v.autorotate"});
  ExpectRefused(head + "    autorotate: true\n",
                {"field pipelines.v.autorotate: is a video field; it needs `kind: video`"});
  ExpectRefused(head + "    kind: video\n    dtype: float32\n",
                {"field pipelines.v.dtype: must be uint8 for video pipelines"});
}

TEST_CASE("kind audio reads its fields with their defaults", "[config][audio]") {
  absl::StatusOr<DaemonConfig> c = Parse(R"(
pipelines:
  speech:
    dataset: {list: /data/speech/train.txt}
    kind: audio
  music:
    dataset: {list: /data/music/train.txt}
    kind: audio
    augment: eval
    dtype: float32
    audio:
      sample_rate: 44100
      channels: 2
      clip_seconds: 0.5
      crop: random
      padding: both
      max_samples: 1000000
      max_duration_seconds: 60
  tiny:
    dataset: {list: /data/tiny.txt}
    kind: audio
    audio: {sample_rate: 8000, clip_samples: 100, crop: center}
)");
  REQUIRE(c.ok());
  const TransformSpec& a = c->pipelines[0].config.transform;
  const AudioSpec defaults;
  CHECK(a.kind == MediaKind::kAudio);
  CHECK(a.dtype == DType::kFloat32);  // the default for audio
  CHECK(a.audio.sample_rate == 16000);
  CHECK(a.audio.channels == 1);
  CHECK(a.audio.clip_samples == 16000);  // one second
  CHECK(a.audio.crop == AudioCrop::kAuto);
  CHECK(a.audio.padding == AudioPadding::kEnd);
  CHECK(a.audio.max_samples == defaults.max_samples);
  CHECK(a.audio.max_duration_seconds == defaults.max_duration_seconds);
  CHECK(SampleShape(a) == std::vector<int64_t>{1, 16000});
  const TransformSpec& m = c->pipelines[1].config.transform;
  CHECK(m.mode == AugmentMode::kEval);
  CHECK(m.audio.sample_rate == 44100);
  CHECK(m.audio.channels == 2);
  CHECK(m.audio.clip_samples == 22050);
  CHECK(m.audio.crop == AudioCrop::kRandom);
  CHECK(m.audio.padding == AudioPadding::kBoth);
  CHECK(m.audio.max_samples == 1000000);
  CHECK(m.audio.max_duration_seconds == 60);
  CHECK(SampleBytes(m) == 2 * 22050 * 4);
  const TransformSpec& t = c->pipelines[2].config.transform;
  CHECK(t.audio.clip_samples == 100);
  CHECK(t.audio.crop == AudioCrop::kCentre);
}

TEST_CASE("kind audio refuses bad fields naming them", "[config][audio]") {
  const std::string head = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  const std::string audio = head + "    kind: audio\n";
  ExpectRefused(head + "    kind: sound\n",
                {"field pipelines.p.kind: expected one of image, video, audio, got 'sound'"});
  ExpectRefused(audio + "    dtype: uint8\n",
                {"field pipelines.p.dtype: must be float32 for kind audio, got uint8"});
  ExpectRefused(audio + "    dtype: float16\n",
                {"field pipelines.p.dtype: must be float32 for kind audio, got float16"});
  ExpectRefused(head + "    audio: {sample_rate: 8000}\n",
                {"field pipelines.p.audio: is only for `kind: audio`"});
  ExpectRefused(audio + "    audio: {sample_rate: 500}\n",
                {"field pipelines.p.audio.sample_rate: must be within [1000, 384000]"});
  ExpectRefused(audio + "    audio: {channels: 6}\n",
                {"field pipelines.p.audio.channels: must be within [1, 2]"});
  ExpectRefused(audio + "    audio: {clip_samples: 0}\n",
                {"field pipelines.p.audio.clip_samples: must be within [1, 16777216]"});
  ExpectRefused(audio + "    audio: {clip_samples: 10, clip_seconds: 1}\n",
                {"field pipelines.p.audio.clip_samples: give either `clip_samples` or "
                 "`clip_seconds`, not both"});
  ExpectRefused(audio + "    audio: {clip_seconds: 2000}\n",
                {"field pipelines.p.audio.clip_seconds: gives 32000000 samples at 16000 Hz"});
  ExpectRefused(audio + "    audio: {crop: left}\n",
                {"field pipelines.p.audio.crop: expected one of auto, random, centre, center"});
  ExpectRefused(audio + "    audio: {padding: wrap}\n",
                {"field pipelines.p.audio.padding: expected one of end, both"});
  ExpectRefused(audio + "    audio: {max_samples: 0}\n",
                {"field pipelines.p.audio.max_samples: must be within [1,"});
  ExpectRefused(audio + "    audio: {max_duration_seconds: 0}\n",
                {"field pipelines.p.audio.max_duration_seconds: must be within [0.001,"});
  ExpectRefused(audio + "    audio: {rate: 8000}\n",
                {"field pipelines.p.audio.rate: unknown field"});
}

TEST_CASE("augment: a list of ops maps onto the fused transform, in its order", "[config]") {
  auto pipeline = [](const std::string& augment, const std::string& more = "") {
    return "pipelines:\n  p:\n    dataset: {root: /data/x}\n    size: 64\n    augment: " + augment +
           "\n" + more;
  };
  auto c = Parse(pipeline(
      "[{op: random_resized_crop, scale: [0.3, 1]}, {op: horizontal_flip}, "
      "{op: vertical_flip, p: 0.25}, {op: grayscale}, {op: normalize, mean: [0.5, 0.5, 0.5]}]"));
  REQUIRE(c.ok());
  const TransformSpec& t = c->pipelines[0].config.transform;
  CHECK(t.mode == AugmentMode::kTrain);
  CHECK(t.scale_min == 0.3);
  CHECK(t.flip_probability == 0.5);
  CHECK(t.vflip_probability == 0.25);
  CHECK(t.grayscale_probability == 0.1);  // RandomGrayscale's default
  CHECK(t.dtype == DType::kFloat32);      // normalize makes floats
  CHECK(t.mean[0] == 0.5f);

  // The train preset, as a list: the same transform.
  auto preset = Parse(pipeline("train"));
  auto listed = Parse(pipeline("[{op: random_resized_crop}, {op: horizontal_flip}]"));
  REQUIRE(preset.ok());
  REQUIRE(listed.ok());
  CHECK(TransformFingerprint(preset->pipelines[0].config.transform) ==
        TransformFingerprint(listed->pipelines[0].config.transform));

  // Eval as ops; what the list does not name does not happen.
  c = Parse(pipeline("[{op: resize, size: 73}, {op: center_crop}]"));
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].config.transform.mode == AugmentMode::kEval);
  CHECK(c->pipelines[0].config.transform.resize_size == 73);
  CHECK(c->pipelines[0].config.transform.flip_probability == 0);

  ExpectRefused(pipeline("[{op: horizontal_flip}]"),
                {"pipelines.p.augment[0].op", "the first op must be"});
  ExpectRefused(
      pipeline("[{op: random_resized_crop}, {op: grayscale}, {op: horizontal_flip}]"),
      {"augment[2].op", "'horizontal_flip' after 'grayscale'", "the ops run in the order"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: rand_augment}]"),
                {"unknown op 'rand_augment'", "known: random_resized_crop"});
  ExpectRefused(pipeline("[{op: resize, size: 80}]"), {"followed by center_crop"});
  ExpectRefused(pipeline("[{op: resize, size: 32}, {op: center_crop}]"),
                {"at least the output size"});
  ExpectRefused(pipeline("[{op: random_resized_crop, colour: 1}]"), {"augment[0].colour"});
  ExpectRefused(pipeline("[{op: random_resized_crop}]", "    scale: [0.5, 1]\n"),
                {"pipelines.p.scale", "set by `augment`'s ops"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: normalize}]", "    dtype: uint8\n"),
                {"normalize makes floats"});
  ExpectRefused(pipeline("[]"), {"an empty list"});
}

TEST_CASE("augment: random crop with padding, colour jitter, blur and TrivialAugmentWide",
          "[config]") {
  auto pipeline = [](const std::string& augment, const std::string& more = "") {
    return "pipelines:\n  p:\n    dataset: {root: /data/x}\n    size: 32\n    augment: " + augment +
           "\n" + more;
  };
  auto c = Parse(
      pipeline("[{op: random_resized_crop}, {op: random_crop, padding: 4, padding_mode: reflect}, "
               "{op: horizontal_flip}, {op: color_jitter, brightness: 0.4, contrast: [0.5, 1.5], "
               "saturation: 0.4, hue: 0.1, p: 0.8}, {op: grayscale, p: 0.2}, "
               "{op: gaussian_blur, kernel_size: [5, 3], sigma: [0.1, 2.0], p: 0.5}, "
               "{op: trivial_augment_wide}, {op: normalize}]"));
  REQUIRE(c.ok());
  const ImageOpsSpec& o = c->pipelines[0].config.transform.image_ops;
  CHECK(o.padding == 4);
  CHECK(o.padding_mode == PadMode::kReflect);
  CHECK(o.jitter_probability == 0.8);
  CHECK(o.brightness_min == Approx(0.6));  // torchvision's [max(0, 1 − b), 1 + b]
  CHECK(o.brightness_max == Approx(1.4));
  CHECK(o.contrast_min == 0.5);
  CHECK(o.contrast_max == 1.5);
  CHECK(o.hue_min == Approx(-0.1));
  CHECK(o.hue_max == Approx(0.1));
  CHECK(o.blur_kernel_width == 5);
  CHECK(o.blur_kernel_height == 3);
  CHECK(o.blur_probability == 0.5);
  CHECK(o.trivial_augment_bins == 31);
  CHECK(c->pipelines[0].config.transform.grayscale_probability == 0.2);
  // They change the output: another fingerprint than without them.
  auto plain =
      Parse(pipeline("[{op: random_resized_crop}, {op: horizontal_flip}, "
                     "{op: grayscale, p: 0.2}, {op: normalize}]"));
  REQUIRE(plain.ok());
  CHECK(TransformFingerprint(plain->pipelines[0].config.transform) !=
        TransformFingerprint(c->pipelines[0].config.transform));

  c =
      Parse(pipeline("[{op: random_resized_crop}, {op: gaussian_blur, kernel_size: 9}, "
                     "{op: trivial_augment_wide, num_magnitude_bins: 7}]"));
  REQUIRE(c.ok());
  CHECK(c->pipelines[0].config.transform.image_ops.blur_kernel_width == 9);
  CHECK(c->pipelines[0].config.transform.image_ops.blur_kernel_height == 9);
  CHECK(c->pipelines[0].config.transform.image_ops.blur_sigma_min == 0.1);  // torchvision's
  CHECK(c->pipelines[0].config.transform.image_ops.blur_probability == 1);
  CHECK(c->pipelines[0].config.transform.image_ops.trivial_augment_bins == 7);

  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: color_jitter}]"),
                {"augment[1]", "color_jitter changes nothing"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: color_jitter, hue: 0.7}]"),
                {"augment[1].hue"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: gaussian_blur, kernel_size: 4}]"),
                {"augment[1].kernel_size", "must be odd"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: gaussian_blur, kernel_size: 65}]"),
                {"blur_kernel_width", "at most 2 x the output side - 1 (63), got 65"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: gaussian_blur}]"),
                {"missing `kernel_size`"});
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: random_crop}]"), {"missing `padding`"});
  ExpectRefused(
      pipeline(
          "[{op: random_resized_crop}, {op: random_crop, padding: 40, padding_mode: reflect}]"),
      {"less than the output's sides"});
  ExpectRefused(
      pipeline("[{op: random_resized_crop}, {op: trivial_augment_wide}, {op: grayscale}]"),
      {"'grayscale' after 'trivial_augment_wide'"});
  // A blur kernel too large for a size a stream may choose.
  ExpectRefused(pipeline("[{op: random_resized_crop}, {op: gaussian_blur, kernel_size: 41}]",
                         "    allowed_sizes: [16]\n"),
                {"pipelines.p.allowed_sizes", "16x16"});
  // Boxes and masks do not follow TrivialAugmentWide's shears and rotations.
  ExpectRefused(
      "pipelines:\n  p:\n    dataset: {shards: \"/data/s{0..1}.tar\", label_key: \"\"}\n"
      "    augment: [{op: random_resized_crop}, {op: trivial_augment_wide}]\n"
      "    fields: [{name: b, member: npy, type: npy, geometry: boxes_xyxy}]\n",
      {"pipelines.p.fields[0]", "do not follow trivial_augment_wide"});
}

}  // namespace
}  // namespace conveyor::server
