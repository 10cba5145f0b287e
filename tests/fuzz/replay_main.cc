// A main() for the fuzz targets in builds without libFuzzer: runs the
// target once over every file named on the command line, and over every
// file in every folder named (not recursively; names starting with '.'
// skipped), as libFuzzer's own main does with files. CTest runs each
// target this way over its seed corpus and regressions (tests/CMakeLists.txt),
// so every crasher ever found stays a regression test in every build.
// Exits 1 when an argument cannot be read, and reports how many inputs ran.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

// Targets that need no set-up do not define it.
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

bool RunFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  // A copy of exactly the input's size, so that ASan catches reads past it.
  std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size()]);
  std::copy(bytes.begin(), bytes.end(), exact.get());
  LLVMFuzzerTestOneInput(exact.get(), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  int ran = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    struct stat st {};
    if (::stat(arg.c_str(), &st) != 0) {
      std::fprintf(stderr, "replay: no such file or folder: %s\n", arg.c_str());
      ok = false;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      ok = RunFile(arg) && ok;
      ++ran;
      continue;
    }
    std::vector<std::string> names;
    if (DIR* dir = ::opendir(arg.c_str())) {
      while (dirent* e = ::readdir(dir)) {
        if (e->d_name[0] != '.') names.push_back(e->d_name);
      }
      ::closedir(dir);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      ok = RunFile(arg + "/" + name) && ok;
      ++ran;
    }
  }
  std::fprintf(stderr, "replay: %d input(s) ran\n", ran);
  return ok ? 0 : 1;
}
