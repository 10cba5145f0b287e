// Tar header scanning. See tar_index.h for the formats and the rules.
#include "core/data/tar_index.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/data/dataset_index.h"

namespace conveyor {
namespace {

constexpr uint64_t kBlock = 512;
// Sizes above this are refused as bad size fields (no shard is 4 EiB), so
// that rounding up to a block never overflows.
constexpr uint64_t kMaxNumber = uint64_t{1} << 62;

uint64_t Padded(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

// A numeric header field: octal digits (leading spaces or NULs, ending in
// spaces or NULs; all NUL = 0) or GNU base-256 (first byte 0x80, big-endian).
std::optional<uint64_t> ParseNumber(const uint8_t* f, size_t len) {
  uint64_t v = 0;
  if (f[0] & 0x80) {
    if (f[0] != 0x80) return std::nullopt;  // 0xff: negative; others: not a number
    for (size_t i = 1; i < len; ++i) {
      if (v > (kMaxNumber >> 8)) return std::nullopt;
      v = (v << 8) | f[i];
    }
    return v <= kMaxNumber ? std::optional<uint64_t>(v) : std::nullopt;
  }
  size_t i = 0;
  while (i < len && (f[i] == ' ' || f[i] == 0)) ++i;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; ++i) {
    if (v > (kMaxNumber >> 3)) return std::nullopt;
    v = v * 8 + (f[i] - '0');
  }
  for (; i < len; ++i) {
    if (f[i] != ' ' && f[i] != 0) return std::nullopt;
  }
  return v <= kMaxNumber ? std::optional<uint64_t>(v) : std::nullopt;
}

// A NUL-terminated field of at most `len` bytes.
std::string_view Field(const uint8_t* f, size_t len) {
  const char* c = reinterpret_cast<const char*>(f);
  return std::string_view(c, strnlen(c, len));
}

bool ChecksumMatches(const uint8_t* h, uint64_t stored) {
  uint64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const uint8_t b = (i >= 148 && i < 156) ? ' ' : h[i];
    unsigned_sum += b;
    signed_sum += static_cast<int8_t>(b);
  }
  // Some old writers summed signed chars.
  return stored == unsigned_sum || static_cast<int64_t>(stored) == signed_sum;
}

// Reads the shard in chunks and keeps the last one, so consecutive headers
// and small members cost one read per chunk.
class Chunks {
 public:
  Chunks(const ByteRangeReader& reader, std::string_view shard, uint64_t size, uint64_t chunk)
      : reader_(reader), shard_(shard), size_(size), chunk_(std::max<uint64_t>(chunk, kBlock)) {}

  // Bytes [offset, offset + len). REQUIRES: offset + len <= size.
  absl::StatusOr<const uint8_t*> Get(uint64_t offset, uint64_t len) {
    if (offset >= start_ && offset + len <= start_ + buf_.size()) {
      return buf_.data() + (offset - start_);
    }
    const uint64_t want = std::min(std::max(len, chunk_), size_ - offset);
    buf_.clear();
    start_ = 0;
    RETURN_IF_ERROR(reader_.ReadRange(shard_, offset, want, &buf_));
    start_ = offset;
    return buf_.data();
  }

 private:
  const ByteRangeReader& reader_;
  const std::string_view shard_;
  const uint64_t size_;
  const uint64_t chunk_;
  uint64_t start_ = 0;
  std::vector<uint8_t> buf_;
};

// What pax records say about the next member.
struct Pending {
  std::optional<std::string> name;
  std::optional<uint64_t> size;
  bool sparse = false;                     // GNU.sparse.* records: a pax sparse member
  std::optional<std::string> sparse_name;  // GNU.sparse.name: its real name (format 1.0)
};

// Parses pax records "LEN KEY=VALUE\n" (LEN counts the whole record).
// Returns the reason on a malformed record.
std::optional<std::string> ParsePax(std::string_view data, const TarScanLimits& limits,
                                    Pending* pending) {
  while (!data.empty()) {
    size_t i = 0;
    uint64_t len = 0;
    while (i < data.size() && i < 20 && data[i] >= '0' && data[i] <= '9') {
      len = len * 10 + (data[i] - '0');
      ++i;
    }
    if (i == 0 || i >= data.size() || data[i] != ' ' || len <= i + 1 || len > data.size() ||
        data[len - 1] != '\n') {
      return "malformed pax record";
    }
    const std::string_view record = data.substr(i + 1, len - i - 2);  // "KEY=VALUE"
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return "pax record without '='";
    const std::string_view key = record.substr(0, eq);
    const std::string_view value = record.substr(eq + 1);
    if (key == "path") {
      if (value.size() > limits.max_name_bytes) {
        return absl::StrCat("pax path of ", value.size(), " bytes exceeds the limit of ",
                            limits.max_name_bytes);
      }
      pending->name = std::string(value);
    } else if (key == "size") {
      uint64_t v = 0;
      if (value.empty() || value.size() > 19) return "bad pax size";
      for (char c : value) {
        if (c < '0' || c > '9') return "bad pax size";
        v = v * 10 + (c - '0');
      }
      if (v > kMaxNumber) return "bad pax size";
      pending->size = v;
    } else if (key.substr(0, 11) == "GNU.sparse.") {
      // GNU tar's pax sparse formats (0.0, 0.1, 1.0): the member's data is
      // not the file's bytes (a map and the non-hole parts); 1.0 hides the
      // real name under "GNUSparseFile.N/" and gives it here.
      pending->sparse = true;
      if (key == "GNU.sparse.name") {
        if (value.size() > limits.max_name_bytes) {
          return absl::StrCat("GNU.sparse.name of ", value.size(), " bytes exceeds the limit of ",
                              limits.max_name_bytes);
        }
        pending->sparse_name = std::string(value);
      }
    }
    data.remove_prefix(len);
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<TarScan> ScanTar(const ByteRangeReader& reader, std::string_view shard,
                                const TarScanLimits& limits,
                                const std::function<bool(std::string_view name)>& want_data) {
  ASSIGN_OR_RETURN(const uint64_t size, reader.Size(shard));
  auto error = [&](uint64_t at, std::string_view reason) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: offset %d: %s", std::string(shard), at, std::string(reason)));
  };
  Chunks chunks(reader, shard, size, limits.chunk_bytes);
  TarScan scan;
  Pending pending;
  uint64_t entries = 0;
  uint64_t pos = 0;
  for (;;) {
    if (pos == size) {
      return error(pos, "the archive ends without its end-of-archive block (truncated shard)");
    }
    if (size - pos < kBlock) {
      return error(pos, absl::StrCat("header cut short: ", size - pos,
                                     " bytes left of 512 (truncated shard)"));
    }
    ASSIGN_OR_RETURN(const uint8_t* h, chunks.Get(pos, kBlock));
    if (std::all_of(h, h + kBlock, [](uint8_t b) { return b == 0; })) {
      if (pending.name || pending.size || pending.sparse) {
        return error(pos, "the archive ends after an extended header, without its member");
      }
      // End of archive. Writers pad it with zeros (two blocks, then up to a
      // 10 KiB record); anything else after it, within the next chunk, is
      // most likely another archive appended (cat a.tar b.tar): its members
      // are not read (as tar without -i), and the caller is told.
      const uint64_t look = std::min<uint64_t>(size - pos, std::max(limits.chunk_bytes, kBlock));
      ASSIGN_OR_RETURN(const uint8_t* rest, chunks.Get(pos, look));
      const uint8_t* data = std::find_if(rest, rest + look, [](uint8_t b) { return b != 0; });
      if (data != rest + look) {
        const uint64_t at = pos + static_cast<uint64_t>(data - rest) / kBlock * kBlock;
        scan.warnings.push_back(absl::StrFormat(
            "%s: offset %d: data after the end-of-archive block at offset %d (concatenated "
            "archives?) is ignored: members past it are not served",
            std::string(shard), at, pos));
      }
      return scan;
    }
    const std::optional<uint64_t> stored_sum = ParseNumber(h + 148, 8);
    if (!stored_sum || !ChecksumMatches(h, *stored_sum)) {
      return error(pos, "header checksum mismatch (corrupt shard, or not a tar file)");
    }
    if (std::memcmp(h + 257, "ustar", 5) != 0) {
      return error(pos, "not a ustar, GNU or pax header (no 'ustar' magic)");
    }
    if (++entries > limits.max_members) {
      return error(pos, absl::StrCat("more than ", limits.max_members, " entries in one shard"));
    }
    const std::optional<uint64_t> header_size = ParseNumber(h + 124, 12);
    if (!header_size) return error(pos, "bad size field");
    const char type = static_cast<char>(h[156]);
    const bool gnu_sparse = type == 'S';  // old GNU sparse: a map in the header
    const bool regular = type == '0' || type == '\0' || type == '7' || gnu_sparse;
    const bool no_data = type >= '1' && type <= '6';  // links, devices, folders, FIFOs
    uint64_t data_size = no_data ? 0 : *header_size;
    if (regular && pending.size) data_size = *pending.size;
    uint64_t data_offset = pos + kBlock;
    if (gnu_sparse && h[482] != 0) {
      // "isextended": the map goes on in extension blocks (21 entries and
      // their own flag at byte 504 each) between the header and the data.
      const uint64_t max_blocks = std::max<uint64_t>(1, limits.max_pax_bytes / kBlock);
      for (uint64_t blocks = 1;; ++blocks) {
        if (blocks > max_blocks) {
          return error(
              pos, absl::StrCat("GNU sparse map of more than ", max_blocks, " extension blocks"));
        }
        if (size - data_offset < kBlock) {
          return error(pos, "GNU sparse map cut short (truncated shard)");
        }
        ASSIGN_OR_RETURN(const uint8_t* ext, chunks.Get(data_offset, kBlock));
        data_offset += kBlock;
        if (ext[504] == 0) break;
      }
    }
    if (data_size > size - data_offset) {
      return error(pos,
                   absl::StrFormat("entry of %d bytes runs past the end of the shard (%d bytes): "
                                   "truncated shard or bad size field",
                                   data_size, size));
    }
    switch (type) {
      case 'L': {  // GNU long name of the next entry
        if (data_size > limits.max_name_bytes) {
          return error(pos, absl::StrCat("GNU long name of ", data_size,
                                         " bytes exceeds the limit of ", limits.max_name_bytes));
        }
        ASSIGN_OR_RETURN(const uint8_t* d, chunks.Get(data_offset, data_size));
        pending.name = std::string(Field(d, data_size));
        break;
      }
      case 'x': {  // pax extended header of the next entry
        if (data_size > limits.max_pax_bytes) {
          return error(pos, absl::StrCat("pax header of ", data_size,
                                         " bytes exceeds the limit of ", limits.max_pax_bytes));
        }
        ASSIGN_OR_RETURN(const uint8_t* d, chunks.Get(data_offset, data_size));
        if (std::optional<std::string> bad = ParsePax(
                std::string_view(reinterpret_cast<const char*>(d), data_size), limits, &pending)) {
          return error(pos, *bad);
        }
        break;
      }
      case 'K':  // GNU long link name, 'g': pax global header: nothing we use
      case 'g': break;
      default: {
        std::string name;
        const bool sparse = regular && (gnu_sparse || pending.sparse);
        if (sparse && pending.sparse_name) {
          name = std::move(*pending.sparse_name);
        } else if (pending.name) {
          name = std::move(*pending.name);
        } else {
          name = std::string(Field(h, 100));
          const std::string_view prefix = Field(h + 345, 155);
          // Only POSIX ustar has the prefix field (GNU keeps times there).
          if (std::memcmp(h + 257, "ustar\0", 6) == 0 && !prefix.empty()) {
            name = absl::StrCat(std::string(prefix), "/", name);
          }
        }
        pending = Pending();
        if (!regular) {
          ++scan.ignored;
          break;
        }
        if (absl::Status s = ValidateRelativePath(name); !s.ok()) {
          return error(pos, absl::StrCat("member name refused: ", EscapeText(s.message())));
        }
        TarMember m;
        m.header_offset = pos;
        m.offset = data_offset;
        m.size = data_size;
        m.sparse = sparse;
        if (!sparse && want_data && want_data(name)) {
          if (data_size > limits.max_data_bytes) {
            return error(pos, absl::StrCat("member '", EscapeText(name), "' of ", data_size,
                                           " bytes exceeds the limit of ", limits.max_data_bytes,
                                           " for its kind"));
          }
          ASSIGN_OR_RETURN(const uint8_t* d, chunks.Get(data_offset, data_size));
          m.data.assign(reinterpret_cast<const char*>(d), data_size);
        }
        m.name = std::move(name);
        scan.members.push_back(std::move(m));
        break;
      }
    }
    const uint64_t padded = Padded(data_size);
    // The padding of the last member may be missing only if nothing follows;
    // the end-of-archive block must, so this is a truncation either way.
    if (padded > size - data_offset) {
      return error(pos, "the last member's padding is cut short (truncated shard)");
    }
    pos = data_offset + padded;
  }
}

}  // namespace conveyor
