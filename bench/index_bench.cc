// index_bench: load time and memory of the dataset index at ImageNet scale.
//
// Generates (unless --list names an existing file) an ImageNet-like list file, 1,281,167
// entries over 1000 classes with paths like n01440764/n01440764_10026.JPEG,
// then loads it with DatasetIndex::LoadListFile and prints the load time,
// MemoryBytes() and the process RSS / peak-RSS growth across the load (read
// from /proc/self/status; the peak is reset first via /proc/self/clear_refs).
//
//   index_bench [--entries N] [--classes C] [--list FILE] [--keep]
//               [--image-folder DIR] [--repeats K]
//
// With --image-folder it loads that ImageFolder tree instead.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/base/rng.h"
#include "core/data/dataset_index.h"

namespace {

struct Args {
  uint64_t entries = 1281167;  // ImageNet-1k train
  uint32_t classes = 1000;
  std::string list;  // list file; generated (and kept) when it does not exist
  std::string image_folder;
  bool keep = false;  // keep the generated file
  int repeats = 3;
  bool help = false;  // --help: usage printed, nothing to run
};

// Value of a "Key:   123 kB" line of /proc/self/status, in bytes.
int64_t ProcStatusBytes(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t key_len = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, key_len, key) == 0 && line.size() > key_len && line[key_len] == ':') {
      return std::strtoll(line.c_str() + key_len + 1, nullptr, 10) * 1024;
    }
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0). False if not permitted.
bool ResetPeakRss() {
  const int fd = ::open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "5", 1) == 1;
  ::close(fd);
  return ok;
}

double Mb(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Writes the ImageNet-like list file, streaming (it never holds it in memory).
bool GenerateList(const Args& args, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    std::perror(path.c_str());
    return false;
  }
  conveyor::Rng rng(2012);
  std::vector<uint64_t> wnids(args.classes);
  for (auto& w : wnids) w = 1000000 + rng.Below(14000000);  // 8-digit WordNet-like ids
  for (uint64_t i = 0; i < args.entries; ++i) {
    const uint32_t label = static_cast<uint32_t>(i * args.classes / args.entries);
    const uint64_t image_id = 1 + rng.Below(60000);
    std::fprintf(f, "n%08" PRIu64 "/n%08" PRIu64 "_%" PRIu64 ".JPEG\t%u\n", wnids[label],
                 wnids[label], image_id, label);
  }
  return std::fclose(f) == 0;
}

// Returns false on a bad argument (usage on stderr); --help sets
// args->help (usage on stdout).
bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: %s [--entries N] [--classes C] [--list FILE] [--keep] "
          "[--image-folder DIR] [--repeats K]\n",
          argv[0]);
      args->help = true;
      return true;
    }
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--keep") {
      args->keep = true;
    } else if ((a == "--entries") && (v = next())) {
      args->entries = std::strtoull(v, nullptr, 10);
    } else if ((a == "--classes") && (v = next())) {
      args->classes = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if ((a == "--list") && (v = next())) {
      args->list = v;
    } else if ((a == "--image-folder") && (v = next())) {
      args->image_folder = v;
    } else if ((a == "--repeats") && (v = next())) {
      args->repeats = std::atoi(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--entries N] [--classes C] [--list FILE] [--keep] "
                   "[--image-folder DIR] [--repeats K]\n",
                   argv[0]);
      return false;
    }
  }
  return args->classes > 0 && args->entries > 0 && args->repeats > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return 2;
  if (args.help) return 0;

  std::string list = args.list;
  bool generated = false;
  if (args.image_folder.empty() && (list.empty() || ::access(list.c_str(), F_OK) != 0)) {
    if (list.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      list = std::string(tmp != nullptr ? tmp : "/tmp") + "/conveyor_index_bench." +
             std::to_string(::getpid()) + ".txt";
    } else {
      args.keep = true;  // --list FILE that does not exist yet: generate it there, keep it
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (!GenerateList(args, list)) return 1;
    generated = true;
    std::printf("generated %s (%" PRIu64 " entries, %u classes) in %.2f s\n", list.c_str(),
                args.entries, args.classes,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  auto load = [&]() {
    return args.image_folder.empty() ? conveyor::DatasetIndex::LoadListFile(list)
                                     : conveyor::DatasetIndex::LoadImageFolder(args.image_folder);
  };

  int rc = 0;
  for (int r = 0; r < args.repeats; ++r) {
    const bool peak_reset = ResetPeakRss();
    const int64_t rss0 = ProcStatusBytes("VmRSS");
    const int64_t hwm0 = ProcStatusBytes("VmHWM");
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const conveyor::DatasetIndex>> index = load();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!index.ok()) {
      std::fprintf(stderr, "load failed: %s\n", index.status().ToString().c_str());
      rc = 1;
      break;
    }
    const int64_t rss1 = ProcStatusBytes("VmRSS");
    const int64_t hwm1 = ProcStatusBytes("VmHWM");
    const conveyor::DatasetIndex& d = **index;
    std::printf(
        "load %d: %zu entries, %zu classes in %.3f s; MemoryBytes %.1f MB (%.1f B/entry); "
        "RSS +%.1f MB; peak RSS +%.1f MB%s\n",
        r + 1, d.size(), d.num_classes(), secs, Mb(d.MemoryBytes()),
        static_cast<double>(d.MemoryBytes()) / d.size(), Mb(rss1 - rss0), Mb(hwm1 - hwm0),
        peak_reset ? "" : " (peak not reset: includes earlier peaks)");
    if (r == 0) std::printf("  e.g. [%zu] %s\n", d.size() / 2, d.FullPath(d.size() / 2).c_str());
  }
  if (generated && !args.keep) ::unlink(list.c_str());
  return rc;
}
