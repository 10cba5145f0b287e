// The tar header scanner of tar shards: reads an archive's headers once,
// through a ByteRangeReader (core/data/byte_range_reader.h; local or remote), and
// lists its regular members as name -> (offset of the data, size), so that a
// member is later fetched with one ranged read. Formats: POSIX ustar (with
// its 155-byte name prefix), GNU (long names in 'L' records, base-256 sizes)
// and pax ('x' records: `path` and `size` override the header's; 'g' global
// records are skipped). Directories, links, devices, FIFOs and other types
// are not members (counted in `ignored`).
//
// Sparse files (GNU's 'S' members, with their extension blocks of the
// sparse map, and GNU tar's pax sparse formats 0.0, 0.1 and 1.0, marked by
// GNU.sparse.* records; 1.0's real name GNU.sparse.name is the member's
// name) are listed with `sparse` set: their data is not the file's bytes,
// so the caller refuses them by name; the members after them are read as
// usual. Their data is never captured (want_data).
//
// The archive ends at its first end-of-archive (all-zero) block; data other
// than zeros after it, within the next chunk (another archive appended to
// this one), is not read, and a warning naming the shard and the offset is
// returned in TarScan::warnings.
//
// Hostile input (a shard may come from anywhere): every header's checksum
// is verified, numbers are parsed strictly (octal or GNU base-256, no
// overflow), long names and pax records are bounded (TarScanLimits), and a
// member whose data runs past the end of the shard, a header cut short or an
// archive without its end-of-archive block is a truncated shard. Member
// names that are empty, absolute, hold a ".." component or a NUL byte are
// refused (nothing is ever extracted, but names become sample paths). Names
// may be any other bytes (not necessarily UTF-8): messages escape them
// (EscapeText). Every error is InvalidArgument (or the reader's own error)
// "SHARD: offset N: reason", naming the shard and the byte offset of the
// header at fault.
//
// Reads go in chunks of TarScanLimits::chunk_bytes, so a shard of small
// members costs about size / chunk_bytes reads, and data of members that
// the caller asks for (want_data, e.g. label members) is captured from the
// chunks already read.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/byte_range_reader.h"

namespace conveyor {

struct TarScanLimits {
  uint64_t max_name_bytes = 64 << 10;  // GNU 'L' long names and pax paths
  uint64_t max_pax_bytes = 1 << 20;    // one pax extended header
  uint64_t max_members = 1 << 24;      // entries of any type in one shard
  uint64_t max_data_bytes = 4096;      // data captured for want_data members
  uint64_t chunk_bytes = 1 << 20;      // bytes asked of the reader at a time
};

struct TarMember {
  std::string name;            // full path inside the archive, as stored
  uint64_t header_offset = 0;  // of its (first) header, for messages
  uint64_t offset = 0;         // of its data
  uint64_t size = 0;
  std::string data;     // its bytes when want_data(name) said so; else empty
  bool sparse = false;  // a sparse file: `offset`/`size` are its archived form
};

struct TarScan {
  std::vector<TarMember> members;     // regular files, in archive order
  uint64_t ignored = 0;               // directories, links and other types
  std::vector<std::string> warnings;  // "SHARD: offset N: ..." for the log
};

// Scans `shard` (an object of `reader`). `want_data` (may be empty) picks
// the members whose data (at most limits.max_data_bytes, else an error
// naming the member) is captured in TarMember::data.
absl::StatusOr<TarScan> ScanTar(const ByteRangeReader& reader, std::string_view shard,
                                const TarScanLimits& limits,
                                const std::function<bool(std::string_view name)>& want_data = {});

}  // namespace conveyor
