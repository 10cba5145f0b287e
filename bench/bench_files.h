// Inputs the C++ benchmarks of bench/ share: every JPEG under a folder read
// into memory, in path order, so that only decoding is timed.
//
// Thread-safety: plain functions without state; safe from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace conveyor::bench {

// The bytes of every .jpg/.jpeg file (any case) under `dir`, recursively,
// sorted by path.
inline std::vector<std::vector<uint8_t>> LoadJpegs(const std::string& dir) {
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (ext == ".jpg" || ext == ".jpeg") paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<std::vector<uint8_t>> files;
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    std::vector<uint8_t> bytes(std::filesystem::file_size(p));
    f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    files.push_back(std::move(bytes));
  }
  return files;
}

}  // namespace conveyor::bench
