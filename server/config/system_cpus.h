// The CPUs conveyord may really use, for `threads: 0`: the CPUs in its
// affinity mask (taskset, a cpuset cgroup, Kubernetes' static CPU manager)
// and the bandwidth its cgroup's CPU quota allows (a container's CPU limit:
// v2 cpu.max, or v1 cpu.cfs_quota_us / cpu.cfs_period_us). Counting the
// machine's cores instead oversubscribes a limited daemon: its workers take
// turns being throttled while each holds a half-decoded image.
//
// Thread-safety: free functions without shared state; they read /proc and
// /sys (below `fs_root` where given, so tests can pass a tree of their own).
#pragma once

#include <string>

namespace conveyor::server {

// CPUs in this process's affinity mask (sched_getaffinity); 0 if unknown.
int AffinityCpuCount();

// The CPU bandwidth this process's cgroup allows, in CPUs (1.5 = 150 ms per
// 100 ms), the tightest over the cgroup and its ancestors (v2), or the v1
// cpu controller's quota; 0 when there is no quota ("max", -1, no file).
double CgroupCpuQuota(const std::string& fs_root);

// The worker count for `threads: 0` from what the probes found: the
// affinity count, lowered to the quota rounded up (a quota of 1.5 CPUs gets
// 2 workers: each may still block on I/O), at least 1; `fallback` (the
// machine's cores) when neither is known. `source` receives where the
// number came from, for the log ("affinity mask: 4 CPUs; cgroup CPU quota:
// 1.50 CPUs").
int UsableCpus(int affinity_cpus, double cgroup_quota, int fallback, std::string* source);

// The CPU time this process may use, in CPUs, for engine.cpu_budget: the
// affinity count lowered to the quota, not rounded (a quota of 1.5 CPUs
// gives 1.5); `fallback` (the machine's cores) when neither is known.
double UsableCpuShare(int affinity_cpus, double cgroup_quota, int fallback);

}  // namespace conveyor::server
