// Tests of what a config reload may change (server/config/reload_diff.h), of the
// pipeline registry it swaps (server/service/pipeline_registry.h) — including
// lookups racing a replacement, for the TSan stage — and of the STATUS text
// the daemon gives systemd (server/notifier.h). Compiled only when
// the server library is built.
#ifdef CONVEYOR_HAVE_SERVER

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/config/config.h"
#include "server/config/reload_diff.h"
#include "server/notifier.h"
#include "server/service/pipeline_registry.h"
#include "tests/unit/temp_dir.h"
#include "tests/unit/test_images.h"

namespace conveyor::server {
namespace {

const SystemInfo kMachine{uint64_t{8} << 30, 0};

DaemonConfig Parse(const std::string& yaml) {
  absl::StatusOr<DaemonConfig> c = ParseConfig(yaml, "test.yaml", "/etc", kMachine);
  INFO(yaml);
  REQUIRE(c.ok());
  return *std::move(c);
}

const char kBase[] = R"(
memory_budget: 1GiB
allowed_roots: [/data]
pipelines:
  train: {dataset: {root: /data/train}, size: 224}
  eval: {dataset: {root: /data/val}, augment: eval}
)";

TEST_CASE("an unchanged file or one changing pipelines and allowed_roots needs no restart",
          "[reload]") {
  const DaemonConfig running = Parse(kBase);
  CHECK(ChangedRestartFields(running, Parse(kBase)).empty());
  CHECK(ChangedRestartFields(running, Parse(R"(
memory_budget: 1GiB
allowed_roots: [/data, /mnt]
pipelines:
  train: {dataset: {root: /mnt/train}, size: 128}
  extra: {dataset: {root: /data/extra}}
)"))
            .empty());
}

TEST_CASE("settings a running daemon cannot change are named", "[reload]") {
  const DaemonConfig running = Parse(kBase);
  const DaemonConfig next = Parse(R"(
memory_budget: 2GiB
max_streams: 7
threads: 3
listen: {tcp: "127.0.0.1:7070"}
per_client: {max_memory: 1GiB}
engine: {fetch_concurrency: 9}
log_level: debug
log_format: json
metrics: {listen: "127.0.0.1:9464"}
stream_idle_timeout_seconds: 10
allowed_roots: [/data]
pipelines:
  train: {dataset: {root: /data/train}, size: 224}
)");
  const std::vector<std::string> fields = ChangedRestartFields(running, next);
  CHECK(fields == std::vector<std::string>{"listen.tcp", "threads", "engine.fetch_concurrency",
                                           "memory_budget", "max_streams", "log_format",
                                           "metrics.listen", "stream_idle_timeout_seconds",
                                           "per_client.max_memory"});
}

TEST_CASE("log_level and the tokens apply live; adding the first token needs a restart",
          "[reload]") {
  const std::string tokens = R"(
memory_budget: 1GiB
allowed_roots: [/data]
pipelines:
  train: {dataset: {root: /data/train}, size: 224}
  eval: {dataset: {root: /data/val}, augment: eval}
access:
  tokens:
    - {name: a, file: /etc/conveyor/a.token}
)";
  const DaemonConfig running = Parse(tokens);
  // Another level, another token, other files and rights: all live.
  CHECK(ChangedRestartFields(running, Parse(R"(
memory_budget: 1GiB
allowed_roots: [/data]
log_level: debug
pipelines:
  train: {dataset: {root: /data/train}, size: 224}
  eval: {dataset: {root: /data/val}, augment: eval}
access:
  require_token_on_unix: true
  tokens:
    - {name: a, file: /etc/conveyor/a2.token, pipelines: [train]}
    - {name: b, file: /etc/conveyor/b.token, operator: true}
)"))
            .empty());
  // From tokens to none and from none to tokens: a restart.
  CHECK(ChangedRestartFields(running, Parse(kBase)) == std::vector<std::string>{"access.tokens"});
  CHECK(ChangedRestartFields(Parse(kBase), running) == std::vector<std::string>{"access.tokens"});
}

TEST_CASE("remote settings need a restart (the reader is built at start)", "[reload]") {
  const DaemonConfig running = Parse(kBase);
  const DaemonConfig next = Parse(R"(
memory_budget: 1GiB
allowed_roots: [/data]
remote:
  max_connections_per_host: 8
  read_ahead_bytes: 32MiB
  max_attempts: 2
  direct_http: true
  io_threads: 2
  s3: {endpoint: "http://127.0.0.1:9000", region: eu-west-1}
pipelines:
  train: {dataset: {root: /data/train}, size: 224}
)");
  CHECK(ChangedRestartFields(running, next) ==
        std::vector<std::string>{"remote.max_connections_per_host", "remote.max_attempts",
                                 "remote.read_ahead_bytes", "remote.direct_http",
                                 "remote.io_threads", "remote.s3.endpoint", "remote.s3.region"});
}

TEST_CASE("pipelines are compared by name and definition", "[reload]") {
  const DaemonConfig running = Parse(kBase);
  const DaemonConfig next = Parse(R"(
memory_budget: 1GiB
allowed_roots: [/data]
pipelines:
  extra: {dataset: {root: /data/extra}}
  eval: {dataset: {root: /data/val}, augment: eval}
  train: {dataset: {root: /data/train}, size: 224, flip_probability: 0}
)");
  const PipelineChanges c = ComparePipelines(running, next);
  CHECK(c.added == std::vector<std::string>{"extra"});
  CHECK(c.removed.empty());
  CHECK(c.changed == std::vector<std::string>{"train"});
  CHECK(c.unchanged == std::vector<std::string>{"eval"});

  const PipelineChanges gone = ComparePipelines(running, Parse(R"(
allowed_roots: [/data]
memory_budget: 1GiB
pipelines:
  eval: {dataset: {root: /data/other}, augment: eval}
)"));
  CHECK(gone.removed == std::vector<std::string>{"train"});
  CHECK(gone.changed == std::vector<std::string>{"eval"});  // another dataset
}

// Pipelines over one small ImageFolder.
struct Pipelines {
  Pipelines() {
    testing::MakeImageFolder(dir.Sub("images"), 1, 2, 40, 32);
    auto loaded = DatasetIndex::LoadImageFolder(dir.Sub("images"));
    REQUIRE(loaded.ok());
    index = *loaded;
  }
  std::shared_ptr<const PipelineConfig> Make(const std::string& name, int size = 32) {
    auto p = std::make_shared<PipelineConfig>();
    p->name = name;
    p->dataset = index;
    p->transform.output_height = p->transform.output_width = size;
    REQUIRE(ValidatePipelineConfig(*p).ok());
    return p;
  }
  testing::TempDir dir;
  std::shared_ptr<const DatasetIndex> index;
};

TEST_CASE("the registry finds pipelines, and names those a reload removed", "[reload]") {
  Pipelines ps;
  PipelineRegistry registry({ps.Make("a"), ps.Make("b")});
  const std::shared_ptr<const PipelineConfig> old_b = *registry.Find("b");
  REQUIRE(registry.Find("a").ok());

  absl::StatusOr<std::shared_ptr<const PipelineConfig>> unknown = registry.Find("zz");
  CHECK(absl::IsNotFound(unknown.status()));
  CHECK(std::string(unknown.status().message()) ==
        "unknown pipeline 'zz'; this daemon serves: a, b");

  registry.Replace({ps.Make("b", 16), ps.Make("c")});
  absl::StatusOr<std::shared_ptr<const PipelineConfig>> removed = registry.Find("a");
  CHECK(absl::IsNotFound(removed.status()));
  CHECK(std::string(removed.status().message()) ==
        "pipeline 'a' was removed by a config reload; this daemon serves: b, c");
  // The replaced definition is new; the one a stream holds is untouched.
  CHECK((*registry.Find("b"))->transform.output_height == 16);
  CHECK(old_b->transform.output_height == 32);
  REQUIRE(registry.List().size() == 2);

  registry.Replace({ps.Make("a")});  // back again: no longer "removed"
  CHECK(registry.Find("a").ok());
  CHECK(std::string(registry.Find("b").status().message()).find("removed") != std::string::npos);
}

TEST_CASE("the registry refuses sets it cannot serve", "[reload]") {
  Pipelines ps;
  CHECK(PipelineRegistry::Validate({ps.Make("a"), ps.Make("b")}).ok());
  CHECK(PipelineRegistry::Validate({}).message() == "no pipelines");
  CHECK(PipelineRegistry::Validate({ps.Make("a"), ps.Make("a")}).message() ==
        "duplicate pipeline name a");
  CHECK(!PipelineRegistry::Validate({ps.Make("a"), nullptr}).ok());
}

TEST_CASE("lookups racing replacements see one whole set or the other", "[reload]") {
  Pipelines ps;
  // Set 0 has x and y at 32 px, set 1 has x and y at 16 px.
  const std::vector<PipelineList> sets = {{ps.Make("x", 32), ps.Make("y", 32)},
                                          {ps.Make("x", 16), ps.Make("y", 16)}};
  PipelineRegistry registry(sets[0]);
  std::atomic<bool> stop{false};
  std::atomic<int> missing{0}, mixed{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const PipelineList list = registry.List();
        absl::StatusOr<std::shared_ptr<const PipelineConfig>> x = registry.Find("x");
        if (!x.ok()) ++missing;
        if (list.size() != 2 ||
            list[0]->transform.output_height != list[1]->transform.output_height) {
          ++mixed;
        }
      }
    });
  }
  for (int i = 0; i < 2000; ++i) registry.Replace(sets[i % 2]);
  stop.store(true);
  for (std::thread& t : readers) t.join();
  CHECK(missing.load() == 0);
  CHECK(mixed.load() == 0);
}

TEST_CASE("the STATUS text counts streams, images per second and pipelines", "[notify]") {
  CHECK(StatusText(ServiceFigures{0, 0, 1}, 0, "") == "0 streams open, 0 images/s, 1 pipeline");
  CHECK(StatusText(ServiceFigures{1, 500, 3}, 1234.4, "last reload: 1 added") ==
        "1 stream open, 1234 images/s, 3 pipelines; last reload: 1 added");
}

}  // namespace
}  // namespace conveyor::server

#endif  // CONVEYOR_HAVE_SERVER
