// NpzWriter: writes numpy .npz files (an uncompressed zip of .npy arrays) for
// test tools, so Python tests can load C++ results with numpy.load. Not
// thread-safe; one writer per file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace conveyor::testing {

class NpzWriter {
 public:
  // descr: numpy dtype string such as "|u1" or "<i8". Copies the bytes.
  void Add(const std::string& name, const std::string& descr, const std::vector<int64_t>& shape,
           const void* data, size_t bytes);
  absl::Status Write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    std::vector<uint8_t> npy;
  };
  std::vector<Entry> entries_;
};

}  // namespace conveyor::testing
