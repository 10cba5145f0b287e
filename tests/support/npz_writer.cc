#include "tests/support/npz_writer.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace conveyor::testing {
namespace {

uint32_t Crc32(const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void Put16(std::string* s, uint16_t v) { s->append(reinterpret_cast<const char*>(&v), 2); }
void Put32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

void NpzWriter::Add(const std::string& name, const std::string& descr,
                    const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string header =
      absl::StrFormat("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
  // magic(6) + version(2) + len(2) + header + '\n', padded to 64 bytes.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  Entry e;
  e.name = name + ".npy";
  std::string pre = "\x93NUMPY";
  pre.push_back(1);
  pre.push_back(0);
  Put16(&pre, static_cast<uint16_t>(header.size()));
  pre += header;
  e.npy.assign(pre.begin(), pre.end());
  const auto* d = static_cast<const uint8_t*>(data);
  e.npy.insert(e.npy.end(), d, d + bytes);
  entries_.push_back(std::move(e));
}

absl::Status NpzWriter::Write(const std::string& path) const {
  std::string out, central;
  for (const Entry& e : entries_) {
    if (e.npy.size() >= 0xFFFFFFFFull) return absl::OutOfRangeError("array too large for zip32");
    const uint32_t crc = Crc32(e.npy.data(), e.npy.size());
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t size = static_cast<uint32_t>(e.npy.size());
    Put32(&out, 0x04034b50);
    Put16(&out, 20);
    Put16(&out, 0);
    Put16(&out, 0);
    Put16(&out, 0);
    Put16(&out, 0);
    Put32(&out, crc);
    Put32(&out, size);
    Put32(&out, size);
    Put16(&out, static_cast<uint16_t>(e.name.size()));
    Put16(&out, 0);
    out += e.name;
    out.append(reinterpret_cast<const char*>(e.npy.data()), e.npy.size());
    Put32(&central, 0x02014b50);
    Put16(&central, 20);
    Put16(&central, 20);
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0);
    Put32(&central, crc);
    Put32(&central, size);
    Put32(&central, size);
    Put16(&central, static_cast<uint16_t>(e.name.size()));
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0);
    Put16(&central, 0);
    Put32(&central, 0);
    Put32(&central, offset);
    central += e.name;
  }
  const uint32_t central_offset = static_cast<uint32_t>(out.size());
  out += central;
  Put32(&out, 0x06054b50);
  Put16(&out, 0);
  Put16(&out, 0);
  Put16(&out, static_cast<uint16_t>(entries_.size()));
  Put16(&out, static_cast<uint16_t>(entries_.size()));
  Put32(&out, static_cast<uint32_t>(central.size()));
  Put32(&out, central_offset);
  Put16(&out, 0);
  std::ofstream f(path, std::ios::binary);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) return absl::InternalError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

}  // namespace conveyor::testing
