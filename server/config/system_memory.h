// SystemInfo: what conveyord needs to know about the machine to resolve its
// config — physical memory and the memory limit of its cgroup (a container's
// limit). Probed once at start by the daemon's main function and passed to
// the config parser, so that parsing itself asks the system nothing and
// tests can give it any machine they like.
//
// Thread-safety: SystemInfo is a plain value; the probes read files and
// sysconf and share no state.
#pragma once

#include <cstdint>
#include <string>

namespace conveyor::server {

struct SystemInfo {
  uint64_t physical_memory = 0;      // bytes of RAM
  uint64_t cgroup_memory_limit = 0;  // bytes; 0 = no limit
  // The CPUs this process may use: its affinity mask's count, lowered to
  // its cgroup's CPU quota (1.5: 150 ms per 100 ms); 0 = unknown. For
  // engine.cpu_budget's bounds and its "N%".
  double usable_cpus = 0;

  // The memory this process may use: physical memory, or the cgroup's limit
  // when that is lower.
  uint64_t MemoryLimit() const;
};

// Physical memory from sysconf (4 GiB when sysconf cannot tell), the
// cgroup limit from CgroupMemoryLimit(""), and the usable CPUs from
// UsableCpuShare (server/config/system_cpus.h).
SystemInfo ProbeSystemInfo();

// The memory limit of this process's cgroup, or 0 when there is none: v2's
// memory.max, or v1's memory.limit_in_bytes (of the process's own cgroup, or
// of the hierarchy's root when the cgroup namespace hides the path). Files
// are read below `fs_root` ("" = the real /proc and /sys; tests pass a tree
// of their own). A limit of "max" or an unreadable file means none.
uint64_t CgroupMemoryLimit(const std::string& fs_root);

}  // namespace conveyor::server
