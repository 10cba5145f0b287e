#include "server/config/system_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace conveyor::server {
namespace {

// v2: "QUOTA PERIOD" or "max PERIOD" in cpu.max; the quota in CPUs, or 0.
double ReadCpuMax(const std::string& path) {
  std::ifstream in(path);
  std::string quota, period;
  if (!(in >> quota >> period)) return 0;
  double q = 0, p = 0;
  if (!absl::SimpleAtod(quota, &q) || !absl::SimpleAtod(period, &p) || q <= 0 || p <= 0) return 0;
  return q / p;
}

// v1: cpu.cfs_quota_us (-1: none) over cpu.cfs_period_us in `dir`.
double ReadCfsQuota(const std::string& dir) {
  std::ifstream q_in(dir + "/cpu.cfs_quota_us"), p_in(dir + "/cpu.cfs_period_us");
  double q = 0, p = 0;
  if (!(q_in >> q) || !(p_in >> p) || q <= 0 || p <= 0) return 0;
  return q / p;
}

// The tightest of two quotas, 0 meaning none.
double Tighter(double a, double b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

}  // namespace

int AffinityCpuCount() {
  // Masks for machines with more than CPU_SETSIZE CPUs need a larger set.
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 16); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) return 0;
    const size_t size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(size, set);
    const bool ok = sched_getaffinity(0, size, set) == 0;
    const int count = ok ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (ok) return count;
    if (errno != EINVAL) return 0;
  }
  return 0;
}

double CgroupCpuQuota(const std::string& fs_root) {
  std::ifstream cgroup(fs_root + "/proc/self/cgroup");
  std::string line;
  double quota = 0;
  while (std::getline(cgroup, line)) {
    if (absl::StartsWith(line, "0::")) {
      // v2: a limit anywhere above the process's cgroup applies too.
      std::string path = line.substr(3);
      while (true) {
        quota = Tighter(quota, ReadCpuMax(fs_root + "/sys/fs/cgroup" + path + "/cpu.max"));
        if (path.empty() || path == "/") break;
        const size_t slash = path.rfind('/');
        path = slash == std::string::npos ? "" : path.substr(0, slash);
      }
    } else if (const size_t colon = line.find(':'); colon != std::string::npos) {
      // v1: "ID:cpu,cpuacct:/path"; the controller list names cpu.
      const size_t second = line.find(':', colon + 1);
      if (second == std::string::npos) continue;
      const std::vector<std::string> controllers =
          absl::StrSplit(line.substr(colon + 1, second - colon - 1), ',');
      if (std::find(controllers.begin(), controllers.end(), "cpu") == controllers.end()) continue;
      const std::string mount = fs_root + "/sys/fs/cgroup/" + absl::StrJoin(controllers, ",");
      double q = ReadCfsQuota(mount + line.substr(second + 1));
      if (q <= 0) q = ReadCfsQuota(mount);  // inside a cgroup namespace
      if (q <= 0) q = ReadCfsQuota(fs_root + "/sys/fs/cgroup/cpu");
      quota = Tighter(quota, q);
    }
  }
  return quota;
}

int UsableCpus(int affinity_cpus, double cgroup_quota, int fallback, std::string* source) {
  std::vector<std::string> from;
  int cpus = 0;
  if (affinity_cpus > 0) {
    cpus = affinity_cpus;
    from.push_back(absl::StrFormat("affinity mask: %d CPUs", affinity_cpus));
  }
  if (cgroup_quota > 0) {
    const int by_quota = std::max(1, static_cast<int>(std::ceil(cgroup_quota - 1e-9)));
    cpus = cpus > 0 ? std::min(cpus, by_quota) : by_quota;
    from.push_back(absl::StrFormat("cgroup CPU quota: %.2f CPUs", cgroup_quota));
  }
  if (cpus <= 0) {
    cpus = std::max(1, fallback);
    from.push_back(absl::StrFormat("%d cores (no affinity mask or quota readable)", cpus));
  }
  if (source != nullptr) *source = absl::StrJoin(from, "; ");
  return cpus;
}

double UsableCpuShare(int affinity_cpus, double cgroup_quota, int fallback) {
  double cpus = affinity_cpus > 0 ? affinity_cpus : 0;
  if (cgroup_quota > 0) cpus = cpus > 0 ? std::min(cpus, cgroup_quota) : cgroup_quota;
  return cpus > 0 ? cpus : std::max(1, fallback);
}

}  // namespace conveyor::server
