// The config of the workers' CPU and its sharing: engine.cpu_budget (a
// number of CPUs or N% of those usable), per_client.weight and
// access.tokens[i].weight; each refusal names its field. Compiled only
// when the server library is built (CONVEYOR_HAVE_SERVER).
#ifdef CONVEYOR_HAVE_SERVER
#include <string>

#include <catch2/catch.hpp>

#include "server/config/config.h"
#include "server/config/reload_diff.h"
#include "server/config/system_cpus.h"
#include "server/config/system_memory.h"

namespace conveyor::server {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A machine of 8 GiB whose process may use 4 CPUs.
SystemInfo Machine(double cpus = 4) {
  SystemInfo s;
  s.physical_memory = 8 * kGiB;
  s.usable_cpus = cpus;
  return s;
}

const char kPipelines[] = R"(
pipelines:
  a:
    dataset: {root: /data/a}
)";

absl::StatusOr<DaemonConfig> Parse(const std::string& yaml, const SystemInfo& system = Machine()) {
  return ParseConfig(yaml + kPipelines, "test.yaml", "/etc", system);
}

void ExpectRefused(const std::string& yaml, std::initializer_list<std::string> parts,
                   const SystemInfo& system = Machine()) {
  absl::StatusOr<DaemonConfig> c = Parse(yaml, system);
  INFO(yaml);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string msg(c.status().message());
  INFO(msg);
  for (const std::string& p : parts) CHECK(msg.find(p) != std::string::npos);
}

TEST_CASE("engine.cpu_budget is unset by default", "[config][cpu]") {
  absl::StatusOr<DaemonConfig> c = Parse("");
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == 0);
  CHECK(c->per_client.weight == 1);
}

TEST_CASE("engine.cpu_budget takes CPUs or a share of those usable", "[config][cpu]") {
  absl::StatusOr<DaemonConfig> c = Parse("engine: {cpu_budget: 1.5}\n");
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == 1.5);
  c = Parse("engine: {cpu_budget: 1}\n");
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == 1);
  c = Parse("engine: {cpu_budget: 50%}\n");
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == 2);                        // of 4
  c = Parse("engine: {cpu_budget: 25%}\n", Machine(1.5));  // a cgroup quota of 1.5 CPUs
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == Approx(0.375));
  c = Parse("engine: {cpu_budget: 4}\n");  // all of them
  REQUIRE(c.ok());
  CHECK(c->engine.cpu_budget == 4);
}

TEST_CASE("a bad engine.cpu_budget is refused naming the field", "[config][cpu]") {
  ExpectRefused("engine: {cpu_budget: 0}\n", {"engine.cpu_budget", "more than 0"});
  ExpectRefused("engine: {cpu_budget: -1}\n", {"engine.cpu_budget", "more than 0"});
  ExpectRefused("engine: {cpu_budget: 5}\n", {"engine.cpu_budget", "more than the 4"});
  ExpectRefused("engine: {cpu_budget: 0%}\n", {"engine.cpu_budget", "0 < N <= 100"});
  ExpectRefused("engine: {cpu_budget: 150%}\n", {"engine.cpu_budget", "0 < N <= 100"});
  ExpectRefused("engine: {cpu_budget: two}\n", {"engine.cpu_budget", "number of CPUs"});
  ExpectRefused("engine: {cpu_budget: [1]}\n", {"engine.cpu_budget"});
  ExpectRefused("engine: {cpu_budget: .nan}\n", {"engine.cpu_budget"});
  // N% of CPUs nobody could count.
  ExpectRefused("engine: {cpu_budget: 50%}\n", {"engine.cpu_budget", "unknown"}, Machine(0));
}

TEST_CASE("per_client.weight and a token's weight", "[config][cpu]") {
  absl::StatusOr<DaemonConfig> c = Parse(
      "per_client: {weight: 2.5}\n"
      "access:\n"
      "  tokens:\n"
      "    - {name: big, file: /t/big, weight: 3}\n"
      "    - {name: plain, file: /t/plain}\n");
  REQUIRE(c.ok());
  CHECK(c->per_client.weight == 2.5);
  REQUIRE(c->access.tokens.size() == 2);
  CHECK(c->access.tokens[0].weight == 3);
  CHECK(c->access.tokens[1].weight == 0);  // per_client.weight applies
  ExpectRefused("per_client: {weight: 0}\n", {"per_client.weight"});
  ExpectRefused("per_client: {weight: -2}\n", {"per_client.weight"});
  ExpectRefused("per_client: {weight: 1e9}\n", {"per_client.weight"});
  ExpectRefused("access: {tokens: [{name: t, file: /t, weight: 0}]}\n",
                {"access.tokens[0].weight"});
}

TEST_CASE("changing cpu_budget or per_client.weight needs a restart", "[config][cpu]") {
  absl::StatusOr<DaemonConfig> a = Parse("");
  absl::StatusOr<DaemonConfig> b = Parse("engine: {cpu_budget: 1}\nper_client: {weight: 2}\n");
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<std::string> changed = ChangedRestartFields(*a, *b);
  CHECK(changed == std::vector<std::string>{"engine.cpu_budget", "per_client.weight"});
}

TEST_CASE("the CPU share usable is the affinity count lowered to the quota", "[config][cpu]") {
  CHECK(UsableCpuShare(8, 0, 2) == 8);
  CHECK(UsableCpuShare(8, 1.5, 2) == 1.5);
  CHECK(UsableCpuShare(1, 2.5, 2) == 1);
  CHECK(UsableCpuShare(0, 0.5, 2) == 0.5);
  CHECK(UsableCpuShare(0, 0, 2) == 2);  // neither known: the machine's cores
}

}  // namespace
}  // namespace conveyor::server
#endif  // CONVEYOR_HAVE_SERVER
