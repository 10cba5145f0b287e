// NumPy .npy values of sample fields (core/data/npy_array.h) and boxes moved
// with their image (core/decode/sample_geometry.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "core/data/npy_array.h"
#include "core/data/sample_fields.h"
#include "core/decode/sample_geometry.h"
#include "tests/unit/field_spec_of.h"

namespace conveyor {
namespace {

// A .npy file as numpy writes it (version 1.0, header padded to 64 bytes).
std::vector<uint8_t> Npy(const std::string& dict, const std::string& data, uint8_t major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  if (major != 1) out.append(2, '\0');
  out += header + data;
  return std::vector<uint8_t>(out.begin(), out.end());
}

std::string Floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

TEST_CASE("npy: numpy's headers parse, with the data where the shape says", "[fields][npy]") {
  auto a = ParseNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }",
                        Floats({1, 2, 3, 4, 5, 6, 7, 8})));
  REQUIRE(a.ok());
  CHECK(a->dtype == "float32");
  CHECK(a->shape == std::vector<int64_t>{2, 4});
  CHECK(a->data.size() == 32);
  auto scalar = ParseNpy(Npy("{'descr': '|u1', 'fortran_order': False, 'shape': (), }", "x", 2));
  REQUIRE(scalar.ok());
  CHECK(scalar->dtype == "uint8");
  CHECK(scalar->shape.empty());
  auto empty = ParseNpy(Npy("{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (0,)}", ""));
  REQUIRE(empty.ok());
  CHECK(empty->dtype == "int64");

  std::vector<uint8_t> written;
  const std::vector<float> values = {0.5f, 1, 2, 3};
  WriteNpyFloat32(values, 1, 4, &written);
  CHECK(written.size() % 64 == 16);  // a 64-byte-aligned header, then the data
  auto back = ParseNpy(written);
  REQUIRE(back.ok());
  CHECK(back->shape == std::vector<int64_t>{1, 4});
  CHECK(std::memcmp(back->data.data(), values.data(), 16) == 0);
}

TEST_CASE("npy: what is not a plain little-endian array is refused, saying why", "[fields][npy]") {
  auto why = [](const std::vector<uint8_t>& bytes) {
    auto a = ParseNpy(bytes);
    REQUIRE_FALSE(a.ok());
    CHECK(a.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(a.status().message());
  };
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
  CHECK(why({'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}).find("no \\x93NUMPY magic") != std::string::npos);
  CHECK(why(Npy(ok_dict, Floats({1, 2}))).find("needs 4 bytes of data, the file has 8") !=
        std::string::npos);
  CHECK(why(Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", Floats({1})))
            .find("not a little-endian") != std::string::npos);
  CHECK(why(Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", Floats({1})))
            .find("Fortran") != std::string::npos);
  CHECK(why(Npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", ""))
            .find("structured") != std::string::npos);
  CHECK(why(Npy("{'descr': '<f4', 'shape': (1,), }", Floats({1}))).find("lacks") !=
        std::string::npos);
  CHECK(why(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, "
                "99999999999, 99999999999), }",
                ""))
            .find("overflows") != std::string::npos);
  std::vector<uint8_t> cut = Npy(ok_dict, Floats({1}));
  cut.resize(20);
  CHECK(why(cut).find("cut short") != std::string::npos);
}

TEST_CASE("a npy field checks the declared element type and the shape of boxes", "[fields][npy]") {
  SampleFieldSpec boxes = testing::FieldSpecOf("boxes", FieldType::kNpy, "npy", true, 4096);
  boxes.geometry = FieldGeometry::kBoxesXyxy;
  const auto f32 =
      Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4), }", Floats({1, 2, 3, 4}));
  NpyArray parsed;
  CHECK(CheckFieldValue(boxes, f32, &parsed).ok());
  const auto three =
      Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }", Floats({1, 2, 3}));
  CHECK(std::string(CheckFieldValue(boxes, three).message()) ==
        "field 'boxes': boxes must have shape [N, 4 or more], not [1, 3]");
  SampleFieldSpec ints =
      testing::FieldSpecOf("ids", FieldType::kNpy, "ids.npy", true, 4096, "int64");
  CHECK(std::string(CheckFieldValue(ints, f32).message()) ==
        "field 'ids': an array of float32, not the declared int64");
  std::vector<double> read;
  size_t columns = 0;
  ReadBoxes(parsed, &read, &columns);
  CHECK(read == std::vector<double>{1, 2, 3, 4});
  CHECK(columns == 4);
}

TEST_CASE("boxes move with the crop, resize and flip; outside ones are dropped",
          "[fields][geometry]") {
  // A train crop of 100x50 at (left 20, top 10) of a 200x100 image, resized
  // to 50x25: scale 0.5 both ways.
  SampleGeometry g{.source_width = 200,
                   .source_height = 100,
                   .output_width = 50,
                   .output_height = 25,
                   .scale_x = 0.5,
                   .scale_y = 0.5,
                   .offset_x = 10,
                   .offset_y = 5};
  std::vector<float> out;
  const std::vector<double> boxes = {40,  20, 80,  40,   // inside: (10, 5)-(30, 15)
                                     0,   0,  30,  20,   // partly outside: clipped to (0, 0)-(5, 5)
                                     150, 70, 190, 90};  // outside the crop: dropped
  TransformBoxes(g, BoxFormat::kXyxy, false, boxes, 4, &out);
  CHECK(out == std::vector<float>{10, 5, 30, 15, 0, 0, 5, 5});
  g.flip = true;
  TransformBoxes(g, BoxFormat::kXyxy, false, boxes, 4, &out);
  CHECK(out == std::vector<float>{20, 5, 40, 15, 45, 0, 50, 5});
  // xywh and normalized: the same first box.
  TransformBoxes(g, BoxFormat::kXywh, true, std::vector<double>{0.2, 0.2, 0.2, 0.2}, 4, &out);
  CHECK(out == std::vector<float>{0.4f, 0.2f, 0.4f, 0.4f});
  // Non-finite coordinates and empty boxes are dropped.
  TransformBoxes(g, BoxFormat::kXyxy, false,
                 std::vector<double>{40, 20, 40, 40, std::nan(""), 0, 1, 1}, 4, &out);
  CHECK(out.empty());
  // Columns after the box (a class, a score) travel with it, or go with it.
  g.flip = false;
  TransformBoxes(g, BoxFormat::kXyxy, false,
                 std::vector<double>{40, 20, 80, 40, 7, 0.5, 150, 70, 190, 90, 3, 0.25}, 6, &out);
  CHECK(out == std::vector<float>{10, 5, 30, 15, 7, 0.5f});
  // A vertical flip mirrors y: (10, 5)-(30, 15) in a 25-high output.
  g.vflip = true;
  TransformBoxes(g, BoxFormat::kXyxy, false, std::vector<double>{40, 20, 80, 40}, 4, &out);
  CHECK(out == std::vector<float>{10, 10, 30, 20});
}

}  // namespace
}  // namespace conveyor
