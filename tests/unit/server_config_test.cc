// Tests of conveyord's config (server/config.h) and command-line flags
// (server/daemon.h): defaults, every field, and one refusal per kind of
// mistake, each naming the field. Compiled only when the server library is
// built (CONVEYOR_HAVE_SERVER comes with conveyor_server_lib).
#ifdef CONVEYOR_HAVE_SERVER

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "server/config.h"
#include "tests/unit/temp_dir.h"
#include "server/daemon.h"

namespace conveyor::server {
namespace {

namespace fs = std::filesystem;

using ::conveyor::testing::TempDir;

absl::StatusOr<DaemonConfig> Parse(const std::string& yaml, const std::string& base = "/etc") {
  return ParseConfig(yaml, "test.yaml", base);
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
  CHECK(c->memory_budget == DefaultMemoryBudget());
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
engine: {fetch_queue_capacity: 8, fetch_concurrency: 2, decode_concurrency: 3}
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
  CHECK(c->engine.fetch_concurrency == 2);
  CHECK(c->engine.decode_concurrency == 3);
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

TEST_CASE("negative and out-of-range numbers are refused", "[config]") {
  const std::string head = "pipelines:\n  p:\n    dataset: {root: /data}\n";
  ExpectRefused("threads: -1\n" + std::string(kMinimal), {"field threads: must not be negative"});
  ExpectRefused("threads: 5000\n" + std::string(kMinimal),
                {"field threads: must be within [0, 1024]"});
  ExpectRefused("max_streams: 0\n" + std::string(kMinimal),
                {"field max_streams: must be within [1,"});
  ExpectRefused(head + "    max_file_bytes: -5MiB\n",
                {"field pipelines.p.max_file_bytes: size must not be negative"});
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
  ExpectRefused("allowed_roots: [allowed]\npipelines:\n  p: {dataset: {root: allowed/link}}\n",
                {"field pipelines.p.dataset.root", "really '" + dir.Sub("secret") + "'",
                 "outside the allowed roots"},
                dir.path());
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
  CHECK(ParseByteSize("50%", true).ok());
  CHECK_FALSE(ParseByteSize("50%", false).ok());
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
  absl::StatusOr<DaemonConfig> c = LoadConfigFile(config);
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
  absl::StatusOr<DaemonConfig> c = LoadConfigFile(config);
  REQUIRE(c.ok());
  absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> p = LoadPipelines(*c);
  REQUIRE_FALSE(p.ok());
  const std::string msg(p.status().message());
  INFO(msg);
  CHECK(msg.find(config + ": field pipelines.p.dataset.root: ") == 0);
  CHECK_FALSE(LoadConfigFile(dir.Sub("nope.yaml")).ok());
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
      Parse("listen: {tcp: '0.0.0.0:7070', data_tcp: '0.0.0.0:7071'}\n" + std::string(kMinimal));
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

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
