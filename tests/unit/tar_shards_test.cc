// Tests of the tar-shard pieces: the header scanner (core/data/tar_index.h) over
// hand-made archives in memory, brace patterns (core/data/brace_pattern.h), the
// shard-local epoch order (core/data/shard_order.h) and LocalRangeReader.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/data/brace_pattern.h"
#include "core/data/file_reader.h"
#include "core/data/local_range_reader.h"
#include "core/data/sampler.h"
#include "core/data/shard_order.h"
#include "core/data/tar_dataset.h"
#include "core/data/tar_index.h"
#include "core/data/tar_shard_source.h"
#include "tests/unit/temp_dir.h"

namespace conveyor {
namespace {

// One object, bytes in memory.
class MemoryReader final : public ByteRangeReader {
 public:
  explicit MemoryReader(std::string bytes) : bytes_(std::move(bytes)) {}
  absl::StatusOr<uint64_t> Size(std::string_view) const override { return bytes_.size(); }
  absl::Status ReadRange(std::string_view, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override {
    if (offset > bytes_.size() || length > bytes_.size() - offset) {
      return absl::OutOfRangeError("past the end");
    }
    out->assign(bytes_.begin() + offset, bytes_.begin() + offset + length);
    return absl::OkStatus();
  }

 private:
  const std::string bytes_;
};

// A ustar header block for `name` of `size` bytes and `type`.
std::string Header(const std::string& name, uint64_t size, char type = '0') {
  std::string h(512, '\0');
  std::memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  std::memcpy(&h[100], "0000644", 7);
  const std::string sz = absl::StrFormat("%011o", size);
  std::memcpy(&h[124], sz.data(), 11);
  h[156] = type;
  std::memcpy(&h[257],
              "ustar\0"
              "00",
              8);
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  const std::string cs = absl::StrFormat("%06o", sum);
  std::memcpy(&h[148], cs.data(), 6);
  h[154] = '\0';
  return h;
}

std::string Member(const std::string& name, const std::string& data, char type = '0') {
  std::string out = Header(name, data.size(), type) + data;
  out.resize((out.size() + 511) / 512 * 512, '\0');
  return out;
}

const std::string kEnd(1024, '\0');

TEST_CASE("ScanTar lists regular members with offsets, long names and label data") {
  const std::string pax_record = "35 path=" + std::string(20, 'p') + "/x.jpg\n";  // 35 bytes
  const std::string tar = Member("a.jpg", "JPEG") + Member("dir", "", '5') +
                          Member("././@LongLink", std::string(150, 'l') + ".cls", 'L') +
                          Member("ignored-name", "7") + Member("pax", pax_record, 'x') +
                          Member("short", "xyz") + kEnd;
  MemoryReader reader(tar);
  TarScanLimits limits;
  limits.chunk_bytes = 512;  // forces re-reads across chunks
  auto scan = ScanTar(reader, "s.tar", limits, [](std::string_view n) {
    return n.size() > 4 && n.substr(n.size() - 4) == ".cls";
  });
  REQUIRE(scan.ok());
  REQUIRE(scan->members.size() == 3);
  CHECK(scan->ignored == 1);
  CHECK(scan->members[0].name == "a.jpg");
  CHECK(scan->members[0].offset == 512);
  CHECK(scan->members[0].size == 4);
  CHECK(scan->members[1].name == std::string(150, 'l') + ".cls");
  CHECK(scan->members[1].data == "7");
  CHECK(scan->members[2].name == std::string(20, 'p') + "/x.jpg");
  CHECK(scan->members[2].size == 3);
}

TEST_CASE("ScanTar refuses hostile archives naming shard and offset") {
  const std::string good = Member("a.jpg", "JPEG") + Member("a.cls", "1") + kEnd;
  auto refused = [](const std::string& bytes, const std::string& part) {
    MemoryReader reader(bytes);
    auto scan = ScanTar(reader, "s.tar", TarScanLimits());
    REQUIRE_FALSE(scan.ok());
    INFO(scan.status().message());
    CHECK(scan.status().message().find(part) != absl::string_view::npos);
  };
  refused(good.substr(0, 1124), "s.tar: offset 1024: header cut short");
  refused(good.substr(0, 1024), "s.tar: offset 1024: the archive ends without");
  refused(good.substr(0, 520), "s.tar: offset 0: the last member's padding is cut short");
  std::string bad = good;
  bad[1] ^= 1;
  refused(bad, "s.tar: offset 0: header checksum mismatch");
  refused(Header("a.jpg", uint64_t{1} << 32) + kEnd,
          "offset 0: entry of 4294967296 bytes runs past");
  refused(Member("../x.jpg", "x") + kEnd, "offset 0: member name refused");
  refused(Member("/etc/x.jpg", "x") + kEnd, "absolute path");
  refused(Member("L", std::string(70000, 'n'), 'L') + kEnd, "GNU long name of 70000 bytes");
  refused(Member("p", "99 path=x\n", 'x') + Member("a", "") + kEnd, "malformed pax record");
  refused(Member("p", "9 size=-\n", 'x') + Member("a", "") + kEnd, "bad pax size");
  refused(Member("p", "10 path=a\n", 'x') + kEnd, "ends after an extended header");
  std::string base256 = Header("a.jpg", 0);
  base256[124] = static_cast<char>(0xff);  // negative
  refused(base256 + kEnd, "checksum mismatch");
  std::string notar(1024, 'x');
  refused(notar + kEnd, "offset 0: header checksum mismatch");
}

// Sets a header block's checksum again after an edit.
std::string Rechecksum(std::string h) {
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  const std::string cs = absl::StrFormat("%06o", sum);
  std::memcpy(&h[148], cs.data(), 6);
  h[154] = '\0';
  return h;
}

// An old GNU sparse member ('S') whose map goes on in one extension block
// ("isextended"), with `data` as its archived bytes.
std::string GnuSparseMember(const std::string& name, const std::string& data) {
  std::string h = Header(name, data.size(), 'S');
  h[482] = 1;  // isextended: an extension block follows the header
  std::string ext(512, '\0');
  std::memcpy(&ext[0], "00000001000", 11);  // one more map entry; ext[504] = 0: the last block
  std::string out = Rechecksum(h) + ext + data;
  out.resize((out.size() + 511) / 512 * 512, '\0');
  return out;
}

// A pax record "LEN KEY=VALUE\n".
std::string PaxRecord(const std::string& kv) {
  size_t len = kv.size() + 2;
  while (std::to_string(len).size() + kv.size() + 2 != len)
    len = std::to_string(len).size() + kv.size() + 2;
  return std::to_string(len) + " " + kv + "\n";
}

TEST_CASE("ScanTar lists GNU and pax sparse members as sparse and reads on past them") {
  const std::string pax = PaxRecord("GNU.sparse.major=1") + PaxRecord("GNU.sparse.minor=0") +
                          PaxRecord("GNU.sparse.name=d/2.jpg") +
                          PaxRecord("GNU.sparse.realsize=4096");
  const std::string tar = GnuSparseMember("d/1.jpg", std::string(700, 's')) +
                          Member("d/1.cls", "1") + Member("pax", pax, 'x') +
                          Member("./GNUSparseFile.77/2.jpg", "1\n0\n4\nJPEG") +
                          Member("d/2.cls", "2") + kEnd;
  MemoryReader reader(tar);
  auto scan = ScanTar(reader, "s.tar", TarScanLimits(), [](std::string_view n) {
    return n.size() > 4 && n.substr(n.size() - 4) == ".cls";
  });
  REQUIRE(scan.ok());
  REQUIRE(scan->members.size() == 4);
  CHECK(scan->members[0].name == "d/1.jpg");
  CHECK(scan->members[0].sparse);
  CHECK(scan->members[0].offset == 1024);  // past the header and its extension block
  CHECK(scan->members[1].name == "d/1.cls");
  CHECK_FALSE(scan->members[1].sparse);
  CHECK(scan->members[1].data == "1");
  CHECK(scan->members[2].name == "d/2.jpg");  // the real name, not GNUSparseFile.77/
  CHECK(scan->members[2].sparse);
  CHECK(scan->members[3].name == "d/2.cls");
  CHECK(scan->members[3].data == "2");
  CHECK(scan->warnings.empty());
}

TEST_CASE("ScanTar warns about data after the end-of-archive block") {
  const std::string first = Member("a.jpg", "JPEG") + Member("a.cls", "1");
  MemoryReader reader(first + kEnd + Member("b.jpg", "JPEG") + Member("b.cls", "2") + kEnd);
  auto scan = ScanTar(reader, "s.tar", TarScanLimits());
  REQUIRE(scan.ok());
  CHECK(scan->members.size() == 2);
  REQUIRE(scan->warnings.size() == 1);
  CHECK(scan->warnings[0] ==
        "s.tar: offset 3072: data after the end-of-archive block at offset 2048 (concatenated "
        "archives?) is ignored: members past it are not served");
  // Zeros after the end (a writer's record padding) are no warning.
  MemoryReader padded(first + kEnd + std::string(10240, '\0'));
  auto quiet = ScanTar(padded, "s.tar", TarScanLimits());
  REQUIRE(quiet.ok());
  CHECK(quiet->warnings.empty());
}

TEST_CASE("ExpandBraces expands ranges and lists with limits") {
  auto one = ExpandBraces("/d/t-{000008..000011}.tar", 100);
  REQUIRE(one.ok());
  CHECK(*one == std::vector<std::string>{"/d/t-000008.tar", "/d/t-000009.tar", "/d/t-000010.tar",
                                         "/d/t-000011.tar"});
  auto two = ExpandBraces("/{a,b}/{1..2}", 100);
  REQUIRE(two.ok());
  CHECK(*two == std::vector<std::string>{"/a/1", "/a/2", "/b/1", "/b/2"});
  CHECK(*ExpandBraces("/plain.tar", 1) == std::vector<std::string>{"/plain.tar"});
  for (const char* bad :
       {"/x{1..3", "/x}", "/x{}", "/x{3..1}", "/x{a..b}", "/x{{1..2}}", "/x{0..999999999}"}) {
    INFO(bad);
    CHECK(absl::IsInvalidArgument(ExpandBraces(bad, 1000).status()));
  }
  CHECK(!ExpandBraces("/{1..10}{1..10}", 99).ok());
  CHECK(ExpandBraces("/{1..10}{1..10}", 100).ok());
}

TEST_CASE("ShardOrder is a deterministic permutation, identity without shuffle") {
  ShardOrder order({10, 0, 7, 13, 1}, 5);
  REQUIRE(order.size() == 31);
  std::vector<uint64_t> identity(31);
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(order.Permutation(1, 0, false) == identity);
  for (uint64_t buffer : {0, 1, 5, 100}) {
    ShardOrder o({10, 0, 7, 13, 1}, buffer);
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      auto p = o.Permutation(9, epoch, true);
      CHECK(p == o.Permutation(9, epoch, true));
      auto sorted = p;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == identity);
    }
  }
  CHECK(order.Permutation(9, 0, true) != order.Permutation(9, 1, true));
  // B <= 1: whole shards in a shuffled order, each in archive order.
  auto whole = ShardOrder({3, 3, 3}, 1).Permutation(4, 2, true);
  for (size_t i = 0; i < whole.size(); i += 3) {
    CHECK(whole[i] % 3 == 0);
    CHECK(whole[i + 1] == whole[i] + 1);
    CHECK(whole[i + 2] == whole[i] + 2);
  }
}

TEST_CASE("The sampler deals an EpochOrder out like its own permutation, resume included") {
  ShardOrder order({6, 6, 6, 6}, 4);
  SamplerOptions o;
  o.dataset_size = 24;
  o.seed = 3;
  o.world_size = 2;
  o.order = &order;
  const auto p = order.Permutation(3, 0, true);
  std::vector<uint64_t> all;
  for (uint32_t r = 0; r < 2; ++r) {
    o.rank = r;
    auto idx = RankIndices(o);
    REQUIRE(idx.ok());
    for (size_t k = 0; k < idx->size(); ++k) CHECK((*idx)[k] == p[k * 2 + r]);
    all.insert(all.end(), idx->begin(), idx->end());
  }
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  o.rank = 1;
  o.offset = 10;
  auto rest = RankIndices(o);
  REQUIRE(rest.ok());
  CHECK(rest->front() == p[11]);
  o.dataset_size = 23;
  CHECK(absl::IsInvalidArgument(RankIndices(o).status()));
}

TEST_CASE("LocalRangeReader reads ranges and refuses ranges past the end") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/f.bin";
  std::ofstream(path) << "0123456789";
  absl::StatusOr<std::shared_ptr<const LocalRangeReader>> opened = LocalRangeReader::Open({path});
  REQUIRE(opened.ok());
  const LocalRangeReader& reader = **opened;
  CHECK(*reader.Size(path) == 10);
  std::vector<uint8_t> out;
  REQUIRE(reader.ReadRange(path, 3, 4, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "3456");
  absl::Status past = reader.ReadRange(path, 8, 4, &out);
  CHECK(absl::IsOutOfRange(past));
  // Named below the shards' common folder, never by the server's path.
  CHECK(past.message().find("f.bin: bytes [8, 12) asked of a file of 10 bytes") == 0);
  CHECK(absl::IsNotFound(reader.ReadRange(dir.path() + "/none", 0, 1, &out)));
  CHECK(absl::IsNotFound(LocalRangeReader::Open({dir.path() + "/none"}).status()));
  CHECK(absl::IsInvalidArgument(LocalRangeReader::Open({dir.path()}).status()));
}

TEST_CASE("LocalRangeReader reads the file it opened, whatever the path names later") {
  testing::TempDir dir;
  std::ofstream(dir.path() + "/a.tar") << "original-a";
  std::ofstream(dir.path() + "/b.tar") << "original-b";
  std::ofstream(dir.path() + "/secret") << "outside!!!";
  const std::string a = dir.path() + "/a.tar", b = dir.path() + "/b.tar";
  absl::StatusOr<std::shared_ptr<const LocalRangeReader>> opened = LocalRangeReader::Open({a, b});
  REQUIRE(opened.ok());
  // a swapped for a link to another file, b renamed over by another file.
  REQUIRE(::unlink(a.c_str()) == 0);
  REQUIRE(::symlink((dir.path() + "/secret").c_str(), a.c_str()) == 0);
  std::ofstream(dir.path() + "/c.tar") << "imposter-b";
  REQUIRE(::rename((dir.path() + "/c.tar").c_str(), b.c_str()) == 0);
  std::vector<uint8_t> out;
  REQUIRE((*opened)->ReadRange(a, 0, 10, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "original-a");
  REQUIRE((*opened)->ReadRange(b, 0, 10, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "original-b");
}

TEST_CASE("LocalRangeReader refuses links, the same file twice and more shards than its cap") {
  testing::TempDir dir;
  REQUIRE(::mkdir((dir.path() + "/sub").c_str(), 0755) == 0);
  std::ofstream(dir.path() + "/sub/a.tar") << "aaaa";
  std::ofstream(dir.path() + "/b.tar") << "bbbb";
  const std::string a = dir.path() + "/sub/a.tar", b = dir.path() + "/b.tar";
  REQUIRE(::symlink(a.c_str(), (dir.path() + "/link.tar").c_str()) == 0);
  // A link to a folder between the common folder and the shard.
  REQUIRE(::symlink((dir.path() + "/sub").c_str(), (dir.path() + "/lsub").c_str()) == 0);
  for (const bool fallback : {false, true}) {  // openat2, and folder by folder
    INFO((fallback ? "fallback" : "openat2"));
    SetOpenat2MissingForTesting(fallback);
    absl::Status link = LocalRangeReader::Open({b, dir.path() + "/link.tar"}).status();
    CHECK(absl::IsPermissionDenied(link));
    CHECK(link.message().find(dir.path() + "/link.tar: symbolic link refused") == 0);
    CHECK(
        absl::IsPermissionDenied(LocalRangeReader::Open({b, dir.path() + "/lsub/a.tar"}).status()));
    CHECK(LocalRangeReader::Open({b, a}).ok());
  }
  SetOpenat2MissingForTesting(false);
  // A hard link: another name for the same inode.
  REQUIRE(::link(a.c_str(), (dir.path() + "/hard.tar").c_str()) == 0);
  absl::Status twice = LocalRangeReader::Open({a, b, dir.path() + "/hard.tar"}).status();
  CHECK(absl::IsInvalidArgument(twice));
  CHECK(twice.message().find(a + " and " + dir.path() + "/hard.tar are the same file") !=
        absl::string_view::npos);
  // The files opened are judged against the allowed roots (resolved).
  const std::string real = std::filesystem::canonical(dir.path()).string();
  CHECK(LocalRangeReader::Open({a, b}, 0, {real}).ok());
  CHECK(LocalRangeReader::Open({a}, 0, {real + "/sub"}).ok());
  absl::Status outside = LocalRangeReader::Open({a, b}, 0, {real + "/sub"}).status();
  CHECK(absl::IsPermissionDenied(outside));
  CHECK(outside.message() ==
        b + " (really " + real + "/b.tar, as opened) lies outside the " + "allowed roots");
  absl::Status cap = LocalRangeReader::Open({a, b}, 1).status();
  CHECK(absl::IsResourceExhausted(cap));
  CHECK(cap.message().find("2 local shards need one open file each, more than the 1 allowed") !=
        absl::string_view::npos);
  CHECK(LocalRangeReader::Open({a, b}, 2).ok());
}

// A MemoryReader that records the Prefetch hints it gets.
class RecordingReader final : public ByteRangeReader {
 public:
  explicit RecordingReader(std::string bytes) : inner_(std::move(bytes)) {}
  absl::StatusOr<uint64_t> Size(std::string_view o) const override { return inner_.Size(o); }
  absl::Status ReadRange(std::string_view o, uint64_t offset, uint64_t length,
                         std::vector<uint8_t>* out) const override {
    return inner_.ReadRange(o, offset, length, out);
  }
  bool Prefetch(std::string_view o, uint64_t offset, uint64_t length) const override {
    if (refuse) return false;
    hints.push_back(absl::StrFormat("%s@%d+%d", std::string(o), offset, length));
    return true;
  }
  // Records a run as "OBJECT run OFFSET+LENGTH ..." (its parts in order).
  bool PrefetchRun(std::string_view o, std::span<const Range> parts) const override {
    if (refuse) return false;
    std::string h = absl::StrFormat("%s run", std::string(o));
    for (const Range& r : parts) absl::StrAppendFormat(&h, " %d+%d", r.offset, r.length);
    hints.push_back(h);
    return true;
  }
  mutable std::vector<std::string> hints;  // single-threaded test only
  bool refuse = false;                     // as a reader whose read-ahead budget is spent

 private:
  MemoryReader inner_;
};

TEST_CASE("TarShardSource's identity of a member: its shard, offset and size", "[output_cache]") {
  const std::string tar = Member("d/1.jpg", "JPEG") + Member("d/1.cls", "1") +
                          Member("d/2.jpg", "JPEG") + Member("d/2.cls", "2") + kEnd;
  auto reader = std::make_shared<RecordingReader>(tar);
  auto dataset = TarDataset::Load({"/s/a.tar"}, *reader, TarDatasetOptions());
  REQUIRE(dataset.ok());
  REQUIRE((*dataset)->size() == 2);
  TarShardSource source(*dataset, reader, 1000);
  std::string first, second, again;
  REQUIRE(source.Identity(0, &first));
  REQUIRE(source.Identity(1, &second));
  REQUIRE(source.Identity(0, &again));
  CHECK(first == again);
  CHECK(first != second);  // same name and bytes, another member
  CHECK(first == "tar:8:/s/a.tar:512:4;");
}

TEST_CASE("TarDataset groups by key; TarShardSource reads one member, forwards Prefetch") {
  const std::string tar = Member("d/2.cls", "5\n") + Member("d/1.png", "PNG!") +
                          Member("d/1.jpg", "JPEG") + Member("d/1.cls", " 7 ") +
                          Member("d/2.jpeg", std::string(600, 'j')) + Member("d/3.json", "{}") +
                          Member("README", "x") + kEnd;
  auto reader = std::make_shared<RecordingReader>(tar);
  auto dataset = TarDataset::Load({"/s/a.tar"}, *reader, TarDatasetOptions());
  REQUIRE(dataset.ok());
  const TarDataset& d = **dataset;
  REQUIRE(d.size() == 2);
  CHECK(d.ignored() == 2);  // README (no key), d/3 (no image)
  CHECK(d.index()->relative_path(0) == "a.tar/d/2.jpeg");
  CHECK(d.index()->label(0) == 5);
  CHECK(d.index()->relative_path(1) == "a.tar/d/1.jpg");  // jpg preferred to png
  CHECK(d.index()->label(1) == 7);
  CHECK(d.index()->root() == "/s");
  TarShardSource source(*dataset, reader, 1000);
  std::vector<uint8_t> out;
  REQUIRE(source.Read(1, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "JPEG");
  const uint64_t upcoming[] = {1, 0};
  source.Prefetch(upcoming, /*every_sample=*/false);
  CHECK(reader->hints == std::vector<std::string>{"/s/a.tar@2560+4", "/s/a.tar@4608+600"});
  // A member whose prefetch is under way is not asked for again (the engine
  // announces a sliding window: each member up to 256 times) until its Read
  // claims it; a refused hint (budget spent) is asked again later.
  reader->hints.clear();
  source.Prefetch(upcoming, /*every_sample=*/false);
  CHECK(reader->hints.empty());
  REQUIRE(source.Read(0, &out).ok());
  source.Prefetch(upcoming, /*every_sample=*/false);
  CHECK(reader->hints == std::vector<std::string>{"/s/a.tar@4608+600"});
  REQUIRE(source.Read(0, &out).ok());
  REQUIRE(source.Read(1, &out).ok());
  reader->hints.clear();
  reader->refuse = true;
  source.Prefetch(upcoming, /*every_sample=*/false);
  reader->refuse = false;
  source.Prefetch(upcoming, /*every_sample=*/false);
  CHECK(reader->hints == std::vector<std::string>{"/s/a.tar@2560+4", "/s/a.tar@4608+600"});
  TarShardSource small(*dataset, reader, 100);
  absl::Status big = small.Read(0, &out);
  CHECK(absl::IsResourceExhausted(big));
  // Named by its dataset-relative path, never the server's absolute one.
  CHECK(big.message().find("a.tar/d/2.jpeg: member of 600 bytes") == 0);
  auto no_label = TarDataset::Load({"/s/b.tar"}, MemoryReader(Member("k.jpg", "x") + kEnd),
                                   TarDatasetOptions());
  CHECK(no_label.status().message() ==
        "/s/b.tar: sample 'k': no '.cls' member holding its label "
        "(dataset.label_key)");
  auto twice = TarDataset::Load({"/s/c.tar"},
                                MemoryReader(Member("k.jpg", "x") + Member("k.jpg", "y") + kEnd),
                                TarDatasetOptions());
  CHECK(twice.status().message() ==
        "/s/c.tar: offset 1024: member 'k.jpg' appears twice in the "
        "shard");
  CHECK(absl::IsNotFound(
      TarDataset::Load({"/s/d.tar"}, MemoryReader(kEnd), TarDatasetOptions()).status()));
  CHECK(absl::IsInvalidArgument(
      TarDataset::Load({"rel.tar"}, MemoryReader(kEnd), TarDatasetOptions()).status()));
}

TEST_CASE("TarDataset refuses two members of one role differing only in case") {
  auto load = [](const std::string& tar) {
    return TarDataset::Load({"/s/a.tar"}, MemoryReader(tar + kEnd), TarDatasetOptions());
  };
  auto labels = load(Member("k.jpg", "x") + Member("k.cls", "1") + Member("k.CLS", "2"));
  REQUIRE_FALSE(labels.ok());
  CHECK(labels.status().message() ==
        "/s/a.tar: offset 2048: sample 'k': members 'k.cls' and 'k.CLS' differ only in the case "
        "of their extension (one role, two members)");
  auto images = load(Member("k.JPG", "x") + Member("k.cls", "1") + Member("k.jpg", "y"));
  REQUIRE_FALSE(images.ok());
  CHECK(images.status().message().find("sample 'k': members 'k.JPG' and 'k.jpg' differ only") !=
        absl::string_view::npos);
  // Two image kinds are a preference, not a clash; other keys are other samples.
  auto fine = load(Member("k.png", "p") + Member("k.jpg", "j") + Member("k.cls", "1") +
                   Member("K.jpg", "J") + Member("K.cls", "2"));
  REQUIRE(fine.ok());
  CHECK((*fine)->size() == 2);
}

TEST_CASE("TarDataset takes GIF image members after every other image extension") {
  const std::string tar = Member("g.gif", "GIF8") + Member("g.cls", "1") + Member("b.GIF", "G") +
                          Member("b.tiff", "TIFF") + Member("b.cls", "2") + kEnd;
  auto dataset = TarDataset::Load({"/s/a.tar"}, MemoryReader(tar), TarDatasetOptions());
  REQUIRE(dataset.ok());
  REQUIRE((*dataset)->size() == 2);
  CHECK((*dataset)->ignored() == 0);
  CHECK((*dataset)->index()->relative_path(0) == "a.tar/g.gif");
  CHECK((*dataset)->index()->relative_path(1) == "a.tar/b.tiff");  // tiff preferred to gif
}

TEST_CASE("TarDataset serves the rest of a shard with sparse members; their samples fail") {
  const std::string tar = Member("a.jpg", "JPEG") + Member("a.cls", "1") +
                          GnuSparseMember("b.jpg", std::string(600, 's')) + Member("b.cls", "2") +
                          Member("c.jpg", "JPEC") + Member("c.cls", "3") + kEnd;
  auto reader = std::make_shared<MemoryReader>(tar);
  auto dataset = TarDataset::Load({"/s/a.tar"}, *reader, TarDatasetOptions());
  REQUIRE(dataset.ok());
  REQUIRE((*dataset)->size() == 3);
  REQUIRE((*dataset)->warnings().size() == 1);
  CHECK((*dataset)->warnings()[0].find("/s/a.tar: offset 2048: 1 sparse member(s), e.g. 'b.jpg'") ==
        0);
  TarShardSource source(*dataset, reader, 1000);
  std::vector<uint8_t> out;
  REQUIRE(source.Read(0, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "JPEG");
  absl::Status sparse = source.Read(1, &out);
  CHECK(absl::IsInvalidArgument(sparse));
  CHECK(sparse.message() ==
        "a.tar/b.jpg: a sparse tar member (GNU or pax sparse file), not served");
  REQUIRE(source.Read(2, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == "JPEC");
  auto label = TarDataset::Load(
      {"/s/b.tar"}, MemoryReader(Member("a.jpg", "J") + GnuSparseMember("a.cls", "1") + kEnd),
      TarDatasetOptions());
  REQUIRE_FALSE(label.ok());
  CHECK(label.status().message().find("label member 'a.cls' is a sparse file") !=
        absl::string_view::npos);
}

TEST_CASE(
    "TarShardSource fetches a hinted member with its run when the stream reads every "
    "sample") {
  // 20 samples (image + label each) in one shard: runs of 16 are samples
  // 0-15 and 16-19.
  std::string tar;
  std::vector<uint64_t> image_offsets;
  for (int i = 0; i < 20; ++i) {
    image_offsets.push_back(tar.size() + 512);
    tar += Member(absl::StrFormat("%03d.jpg", i), std::string(100 + i, 'a' + i % 26));
    tar += Member(absl::StrFormat("%03d.cls", i), std::to_string(i));
  }
  tar += kEnd;
  auto reader = std::make_shared<RecordingReader>(tar);
  auto dataset = TarDataset::Load({"/s/r.tar"}, *reader, TarDatasetOptions());
  REQUIRE(dataset.ok());
  REQUIRE((*dataset)->size() == 20);
  auto part = [&](int i) { return absl::StrFormat(" %d+%d", image_offsets[i], 100 + i); };
  auto run = [&](std::vector<int> samples) {
    std::string h = "/s/r.tar run";
    for (int i : samples) h += part(i);
    return h;
  };
  TarShardSource source(*dataset, reader, 1000);
  const uint64_t one[] = {3};
  source.Prefetch(one, /*every_sample=*/true);
  CHECK(reader->hints ==
        std::vector<std::string>{run({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})});
  // Every member of that run is hinted now: nothing more until a read.
  reader->hints.clear();
  const uint64_t more[] = {0, 15, 17, 9};
  source.Prefetch(more, true);
  CHECK(reader->hints == std::vector<std::string>{run({16, 17, 18, 19})});
  // A read clears its member's mark: hinted again, its run has only it left.
  std::vector<uint8_t> out;
  REQUIRE(source.Read(9, &out).ok());
  CHECK(std::string(out.begin(), out.end()) == std::string(109, 'a' + 9));
  reader->hints.clear();
  source.Prefetch(more, true);
  CHECK(reader->hints == std::vector<std::string>{run({9})});
  // A refused run clears every mark it took, and a stream that is one rank
  // of several hints members alone.
  for (int i = 0; i < 20; ++i) REQUIRE(source.Read(i, &out).ok());
  reader->hints.clear();
  reader->refuse = true;
  source.Prefetch(one, true);
  reader->refuse = false;
  source.Prefetch(one, false);
  const uint64_t next[] = {4};
  source.Prefetch(next, true);
  CHECK(reader->hints ==
        std::vector<std::string>{absl::StrFormat("/s/r.tar@%d+103", image_offsets[3]),
                                 run({0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})});
  // Members over max_file_bytes are left out of runs (their read refuses them).
  for (int i = 0; i < 20; ++i) REQUIRE(source.Read(i, &out).ok());
  reader->hints.clear();
  TarShardSource small(*dataset, reader, 110);
  small.Prefetch(one, true);
  CHECK(reader->hints == std::vector<std::string>{run({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})});
}

TEST_CASE("tar fields: a sample's span covers its field members, cut back into parts",
          "[tar][fields]") {
  // 000: image, caption and JSON; 001: no JSON; 002's caption is apart, after
  // another sample's members.
  const std::string shard = Member("d/000.jpg", "IMG0") + Member("d/000.txt", "a cat") +
                            Member("d/000.json", "{}") + Member("d/001.jpg", "IMG1") +
                            Member("d/001.txt", "a dog") + Member("d/002.jpg", "IMG2") +
                            Member("d/003.jpg", "IMG3") + Member("d/002.txt", "late") + kEnd;
  MemoryReader reader(shard);
  TarDatasetOptions options;
  options.label_key = "";
  options.field_members = {"txt", "JSON", ""};  // a key field has no member
  auto loaded = TarDataset::Load({"/s/a.tar"}, reader, options);
  REQUIRE(loaded.ok());
  const TarDataset& d = **loaded;
  REQUIRE(d.size() == 4);
  auto read = [&](size_t i) {
    std::vector<uint8_t> out;
    REQUIRE(reader.ReadRange("", d.location(i).offset, d.location(i).size, &out).ok());
    return out;
  };
  auto text = [](std::span<const uint8_t> s) {
    return std::string(reinterpret_cast<const char*>(s.data()), s.size());
  };
  std::vector<std::string> images, captions, json, keys;
  for (size_t i = 0; i < d.size(); ++i) {
    const std::vector<uint8_t> bytes = read(i);
    images.push_back(text(d.Media(i, bytes)));
    auto c = d.Member(i, "txt", bytes);
    captions.push_back(c ? text(*c) : "<none>");
    auto j = d.Member(i, "json", bytes);
    json.push_back(j ? text(*j) : "<none>");
    CHECK_FALSE(d.Member(i, "", bytes).has_value());
    CHECK_FALSE(d.Member(i, "cls", bytes).has_value());
    std::string key;
    d.Key(i, &key);
    keys.push_back(key);
    CHECK(d.index()->label(i) == 0);  // no label members
  }
  CHECK(images == std::vector<std::string>{"IMG0", "IMG1", "IMG2", "IMG3"});
  CHECK(captions == std::vector<std::string>{"a cat", "a dog", "late", "<none>"});
  CHECK(json == std::vector<std::string>{"{}", "<none>", "<none>", "<none>"});
  CHECK(keys == std::vector<std::string>{"d/000", "d/001", "d/002", "d/003"});
  // A read of another size is not cut (the decoder refuses it), no member.
  const std::vector<uint8_t> other = {1, 2, 3};
  CHECK(d.Media(0, other).size() == 3);
  CHECK_FALSE(d.Member(0, "txt", other).has_value());

  // Without fields, a location is the image alone, as before.
  auto plain = TarDataset::Load({"/s/a.tar"}, reader, TarDatasetOptions{"", {}, {}});
  REQUIRE(plain.ok());
  CHECK((*plain)->location(0).size == 4);
  CHECK(d.location(0).size > 1024);
}

TEST_CASE("tar fields: two members of one field in a sample are an error naming them",
          "[tar][fields]") {
  MemoryReader reader(Member("k.jpg", "x") + Member("k.txt", "a") + Member("k.TXT", "b") + kEnd);
  TarDatasetOptions options;
  options.label_key = "";
  options.field_members = {"txt"};
  auto loaded = TarDataset::Load({"/s/a.tar"}, reader, options);
  REQUIRE_FALSE(loaded.ok());
  CHECK(
      std::string(loaded.status().message()).find("'k.txt' and 'k.TXT' differ only in the case") !=
      std::string::npos);
}

}  // namespace
}  // namespace conveyor
