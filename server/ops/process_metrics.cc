#include "server/ops/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace conveyor::server {

namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<uint64_t> BootTimeSeconds() {
  const std::string stat = ReadFile("/proc/stat");
  for (absl::string_view line : absl::StrSplit(stat, '\n')) {
    if (!absl::ConsumePrefix(&line, "btime ")) continue;
    uint64_t t = 0;
    if (absl::SimpleAtoi(line, &t)) return t;
  }
  return std::nullopt;
}

std::optional<uint64_t> OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  const int own = dirfd(dir);
  uint64_t n = 0;
  while (const dirent* e = readdir(dir)) {
    int fd = 0;
    if (!absl::SimpleAtoi(e->d_name, &fd) || fd == own) continue;  // ".", "..", the listing's own
    ++n;
  }
  closedir(dir);
  return n;
}

void Gauge(std::string* out, const char* name, const char* type, const char* help,
           const std::string& value) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                  value, "\n");
}

}  // namespace

bool ParseProcStat(std::string_view stat, long ticks_per_second, long page_size,
                   uint64_t boot_time_seconds, ProcessFigures* out) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0 || page_size <= 0) return false;
  const std::vector<absl::string_view> f = absl::StrSplit(
      absl::string_view(stat.data() + close + 1, stat.size() - close - 1), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state) of proc(5); utime is field 14, stime 15,
  // num_threads 20, starttime 22, vsize 23, rss 24.
  constexpr size_t kUtime = 11, kStime = 12, kThreads = 17, kStart = 19, kVsize = 20, kRss = 21;
  if (f.size() <= kRss) return false;
  uint64_t utime = 0, stime = 0, threads = 0, start = 0, vsize = 0;
  int64_t rss = 0;
  if (!absl::SimpleAtoi(f[kUtime], &utime) || !absl::SimpleAtoi(f[kStime], &stime) ||
      !absl::SimpleAtoi(f[kThreads], &threads) || !absl::SimpleAtoi(f[kStart], &start) ||
      !absl::SimpleAtoi(f[kVsize], &vsize) || !absl::SimpleAtoi(f[kRss], &rss)) {
    return false;
  }
  const double ticks = static_cast<double>(ticks_per_second);
  out->cpu_seconds = (utime + stime) / ticks;
  out->threads = threads;
  out->virtual_bytes = vsize;
  out->resident_bytes = static_cast<uint64_t>(rss < 0 ? 0 : rss) * static_cast<uint64_t>(page_size);
  if (boot_time_seconds != 0) out->start_time_seconds = boot_time_seconds + start / ticks;
  return true;
}

ProcessFigures ReadProcessFigures() {
  ProcessFigures p;
  (void)ParseProcStat(ReadFile("/proc/self/stat"), sysconf(_SC_CLK_TCK), sysconf(_SC_PAGESIZE),
                      BootTimeSeconds().value_or(0), &p);
  p.open_fds = OpenFds();
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) p.max_fds = r.rlim_cur;
  return p;
}

std::string RenderProcessMetrics(const ProcessFigures& p) {
  std::string out;
  if (p.cpu_seconds) {
    Gauge(&out, "process_cpu_seconds_total", "counter",
          "Total user and system CPU time spent in seconds.",
          absl::StrFormat("%.2f", *p.cpu_seconds));
  }
  if (p.virtual_bytes) {
    Gauge(&out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
          absl::StrCat(*p.virtual_bytes));
  }
  if (p.resident_bytes) {
    Gauge(&out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
          absl::StrCat(*p.resident_bytes));
  }
  if (p.start_time_seconds) {
    Gauge(&out, "process_start_time_seconds", "gauge",
          "Start time of the process since unix epoch in seconds.",
          absl::StrFormat("%.2f", *p.start_time_seconds));
  }
  if (p.open_fds) {
    Gauge(&out, "process_open_fds", "gauge", "Number of open file descriptors.",
          absl::StrCat(*p.open_fds));
  }
  if (p.max_fds) {
    Gauge(&out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
          absl::StrCat(*p.max_fds));
  }
  if (p.threads) {
    Gauge(&out, "process_threads", "gauge", "Number of OS threads in the process.",
          absl::StrCat(*p.threads));
  }
  return out;
}

}  // namespace conveyor::server
