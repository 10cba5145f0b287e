// costly_jpeg_tool: writes one of the costly JPEGs of tests/support/
// costly_jpeg.h, for the Python tests of the decode limits.
//
//   costly_jpeg_tool many-scans W H OUT   grayscale, 704 progressive scans
//   costly_jpeg_tool progressive-444 W H OUT
// Errors go to stderr with exit status 2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "tests/support/costly_jpeg.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: costly_jpeg_tool many-scans|progressive-444 W H OUT\n");
    return 2;
  }
  const int w = std::atoi(argv[2]);
  const int h = std::atoi(argv[3]);
  if (w < 1 || h < 1 || w > 65500 || h > 65500) {
    std::fprintf(stderr, "costly_jpeg_tool: bad size %s x %s\n", argv[2], argv[3]);
    return 2;
  }
  std::vector<uint8_t> bytes;
  if (std::strcmp(argv[1], "many-scans") == 0) {
    bytes = conveyor::testing::ManyScanGrayJpeg(w, h);
  } else if (std::strcmp(argv[1], "progressive-444") == 0) {
    bytes = conveyor::testing::Progressive444Jpeg(w, h);
  } else {
    std::fprintf(stderr, "costly_jpeg_tool: unknown kind '%s'\n", argv[1]);
    return 2;
  }
  std::ofstream out(argv[4], std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "costly_jpeg_tool: cannot write %s\n", argv[4]);
    return 2;
  }
  return 0;
}
