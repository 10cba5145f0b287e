#include "server/config/system_memory.h"

#include <unistd.h>

#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "server/config/system_cpus.h"

namespace conveyor::server {
namespace {

// The number in a one-value file such as memory.max, or 0 ("max", missing,
// unreadable: no limit).
uint64_t ReadLimit(const std::string& path) {
  std::ifstream in(path);
  std::string value;
  uint64_t limit = 0;
  if (in >> value && absl::SimpleAtoi(value, &limit)) return limit;
  return 0;
}

}  // namespace

uint64_t SystemInfo::MemoryLimit() const {
  if (cgroup_memory_limit > 0 && cgroup_memory_limit < physical_memory) return cgroup_memory_limit;
  return physical_memory;
}

uint64_t CgroupMemoryLimit(const std::string& fs_root) {
  std::ifstream cgroup(fs_root + "/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (absl::StartsWith(line, "0::")) {
      if (uint64_t l = ReadLimit(fs_root + "/sys/fs/cgroup" + line.substr(3) + "/memory.max")) {
        return l;
      }
    } else if (const size_t at = line.find(":memory:"); at != std::string::npos) {
      const std::string dir = fs_root + "/sys/fs/cgroup/memory";
      if (uint64_t l = ReadLimit(dir + line.substr(at + 8) + "/memory.limit_in_bytes")) return l;
      if (uint64_t l = ReadLimit(dir + "/memory.limit_in_bytes")) return l;  // namespaced
    }
  }
  return 0;
}

SystemInfo ProbeSystemInfo() {
  SystemInfo s;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  s.physical_memory = pages > 0 && page > 0
                          ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)
                          : uint64_t{4} << 30;
  s.cgroup_memory_limit = CgroupMemoryLimit("");
  s.usable_cpus = UsableCpuShare(AffinityCpuCount(), CgroupCpuQuota(""),
                                 static_cast<int>(std::thread::hardware_concurrency()));
  return s;
}

}  // namespace conveyor::server
