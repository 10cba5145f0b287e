// NumPy .npy arrays as sample fields: the header of a .npy file parsed and
// checked (format versions 1.0, 2.0 and 3.0; little-endian or byte-order-
// free element types; C order), and float32 arrays written back (a field
// whose values the daemon rewrites, such as boxes moved with their image's
// crop; core/data/sample_geometry.h).
//
// Hostile input: a header is bounded (64 KiB), its dict must hold exactly
// the keys descr, fortran_order and shape, the shape's product must fit and
// equal the data that follows. Errors are InvalidArgument saying what is
// wrong ("npy: ...").
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace conveyor {

struct NpyArray {
  std::string dtype;  // "float32", "float64", "int8" … "int64", "uint8" … "uint64", "bool"
  std::vector<int64_t> shape;
  size_t item_bytes = 0;
  std::span<const uint8_t> data;  // within the parsed bytes
};

// Parses `bytes`, a whole .npy file.
absl::StatusOr<NpyArray> ParseNpy(std::span<const uint8_t> bytes);

// Replaces *out with a version 1.0 .npy file of `rows` × `cols` float32
// values (C order). REQUIRES: values.size() == rows * cols.
void WriteNpyFloat32(std::span<const float> values, int64_t rows, int64_t cols,
                     std::vector<uint8_t>* out);

}  // namespace conveyor
