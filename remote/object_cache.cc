#include "remote/object_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/posix_error.h"
#include "core/base/unique_fd.h"
#include "spdlog/spdlog.h"

namespace conveyor::remote {

namespace {

constexpr uint64_t kMagic = 0x314843594e564e43ull;  // "CNVNYCH1", little-endian
constexpr char kEntrySuffix[] = ".obj";
constexpr char kTempPrefix[] = "tmp.";
// Keys and validators longer than this are not cached (a footer that
// claims more is corrupt).
constexpr uint64_t kMaxMetaBytes = 64 << 10;

struct Footer {
  uint64_t data_size;
  uint64_t meta_size;
  uint64_t checksum;
  uint64_t magic;
};
static_assert(sizeof(Footer) == 32);

std::string Meta(std::string_view key, const ObjectValidators& v) {
  std::string m(key);
  m.push_back('\0');
  m += v.etag;
  m.push_back('\0');
  m += v.last_modified;
  return m;
}

// Splits a file's bytes into (data, key, validators); false when they are
// not an entry.
bool ParseEntry(std::span<const uint8_t> file, Footer* f, std::string* key, ObjectValidators* v) {
  if (file.size() < sizeof(Footer)) return false;
  std::memcpy(f, file.data() + file.size() - sizeof(Footer), sizeof(Footer));
  if (f->magic != kMagic || f->meta_size > kMaxMetaBytes ||
      f->data_size > file.size() - sizeof(Footer) ||
      f->meta_size != file.size() - sizeof(Footer) - f->data_size) {
    return false;
  }
  const std::string_view meta(reinterpret_cast<const char*>(file.data()) + f->data_size,
                              f->meta_size);
  const size_t a = meta.find('\0');
  if (a == std::string_view::npos) return false;
  const size_t b = meta.find('\0', a + 1);
  if (b == std::string_view::npos) return false;
  *key = std::string(meta.substr(0, a));
  v->etag = std::string(meta.substr(a + 1, b - a - 1));
  v->last_modified = std::string(meta.substr(b + 1));
  v->size = f->data_size;
  return true;
}

std::string EntryFile(std::string_view key) {
  const auto* p = reinterpret_cast<const uint8_t*>(key.data());
  return absl::StrFormat("%016x%s", CacheChecksum(std::span<const uint8_t>(p, key.size())),
                         kEntrySuffix);
}

bool DiskFull(int e) { return e == ENOSPC || e == EDQUOT; }

// n bytes at offset `at` of fd into p: 0, an errno, or EILSEQ when the file
// ends first (it shrank).
int PreadAll(int fd, uint8_t* p, uint64_t n, uint64_t at) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return EILSEQ;
    p += r;
    n -= static_cast<uint64_t>(r);
    at += static_cast<uint64_t>(r);
  }
  return 0;
}

// The whole file at `path` into *out; an errno on failure.
int ReadFile(const std::string& path, uint64_t expect, std::vector<uint8_t>* out) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (expect != 0 && size != expect) return EILSEQ;
  out->resize(size);
  return PreadAll(fd.get(), out->data(), size, 0);
}

}  // namespace

uint64_t CacheChecksum(std::span<const uint8_t> bytes) {
  // 64-bit multiply-rotate over 8-byte words (about memory speed), then the tail.
  constexpr uint64_t kPrime = 0x9e3779b97f4a7c15ull;
  uint64_t h = 0xcbf29ce484222325ull ^ (bytes.size() * kPrime);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = (h ^ (w * kPrime)) * 0xff51afd7ed558ccdull;
    h = (h << 31) | (h >> 33);
  }
  for (; i < bytes.size(); ++i) h = (h ^ bytes[i]) * 0x100000001b3ull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

absl::Status CacheFileWriter::Write(int fd, std::span<const uint8_t> bytes) const {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return PosixError("write", errno);
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

ObjectCache::ObjectCache(const CacheOptions& options, std::shared_ptr<const CacheFileWriter> writer)
    : options_(options),
      writer_(writer != nullptr ? std::move(writer) : std::make_shared<CacheFileWriter>()),
      eviction_(MakeCacheEviction(options.eviction)) {}

absl::StatusOr<std::shared_ptr<ObjectCache>> ObjectCache::Open(
    const CacheOptions& options, std::shared_ptr<const CacheFileWriter> writer) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache.dir ", options.dir, ": cannot create: ", ec.message()));
  }
  auto cache = std::make_shared<ObjectCache>(options, std::move(writer));
  const std::string lock = options.dir + "/lock";
  cache->lock_ = UniqueFd(::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (cache->lock_.get() < 0) return PosixError(absl::StrCat("cache.dir ", lock), errno);
  if (::flock(cache->lock_.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cache.dir ", options.dir, " is in use by another process (one daemon per folder)"));
    }
    return PosixError(absl::StrCat("flock ", lock), errno);
  }
  if (absl::Status st = cache->Scan(); !st.ok()) return st;
  return cache;
}

absl::Status ObjectCache::Scan() {
  std::vector<std::string> names;
  {
    DIR* d = ::opendir(options_.dir.c_str());
    if (d == nullptr) return PosixError(absl::StrCat("cache.dir ", options_.dir), errno);
    while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  struct Found {
    std::string key;
    Entry entry;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  uint64_t removed = 0;
  std::vector<uint8_t> bytes;
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(options_.dir, "/", name);
    if (absl::StartsWith(name, kTempPrefix)) {
      ::unlink(path.c_str());  // left by a write that did not finish
      ++removed;
      continue;
    }
    if (!absl::EndsWith(name, kEntrySuffix)) continue;  // not ours: left alone
    Footer f{};
    std::string key;
    ObjectValidators v;
    const bool ok =
        ReadFile(path, 0, &bytes) == 0 && ParseEntry(bytes, &f, &key, &v) &&
        EntryFile(key) == name &&
        CacheChecksum(std::span<const uint8_t>(bytes.data(), f.data_size)) == f.checksum;
    if (!ok) {
      spdlog::warn("cache {}: {} is not a whole entry (torn or foreign), removed", options_.dir,
                   name);
      ::unlink(path.c_str());
      ++removed;
      continue;
    }
    struct stat st {};
    ::stat(path.c_str(), &st);
    found.push_back({std::move(key), Entry{name, std::move(v), bytes.size()},
                     int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec});
  }
  // Oldest first (an LRU's order after a restart), then within the budget.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  MutexLock lock(&mu_);
  for (Found& f : found) {
    if (held_ + f.entry.file_bytes > options_.max_bytes) {
      ::unlink(absl::StrCat(options_.dir, "/", f.entry.file).c_str());  // the budget shrank
      ++counters_.evictions;
      continue;
    }
    held_ += f.entry.file_bytes;
    eviction_->Added(f.key, f.entry.file_bytes);
    entries_[f.key] = std::move(f.entry);
  }
  counters_.removed_at_start = removed;
  spdlog::info("cache {}: {} entries, {:.1f} MiB of {:.1f} MiB{}", options_.dir, entries_.size(),
               held_ / 1048576.0, options_.max_bytes / 1048576.0,
               removed > 0 ? absl::StrCat(", ", removed, " unfinished or corrupt files removed")
                           : std::string());
  return absl::OkStatus();
}

bool ObjectCache::FindEntry(std::string_view key, const ObjectValidators& v, std::string* file,
                            uint64_t* file_bytes) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(std::string(key));
  if (it == entries_.end() || !(it->second.validators == v)) return false;
  *file = it->second.file;
  *file_bytes = it->second.file_bytes;
  return true;
}

bool ObjectCache::Get(std::string_view key, const ObjectValidators& v, std::vector<uint8_t>* out) {
  std::string file;
  uint64_t file_bytes = 0;
  if (!FindEntry(key, v, &file, &file_bytes)) return false;
  Footer f{};
  std::string got_key;
  ObjectValidators got;
  const int e = ReadFile(absl::StrCat(options_.dir, "/", file), file_bytes, out);
  const bool ok = e == 0 && ParseEntry(*out, &f, &got_key, &got) && got_key == key && got == v;
  MutexLock lock(&mu_);
  if (!ok) {
    // Gone or replaced under us: the entry is not what the map says.
    auto it = entries_.find(std::string(key));
    if (it != entries_.end() && it->second.file == file && e != 0) RemoveLocked(it->first);
    return false;
  }
  out->resize(f.data_size);
  ++counters_.hits;
  counters_.bytes_from_cache += f.data_size;
  eviction_->Touched(std::string(key));
  return true;
}

bool ObjectCache::GetRange(std::string_view key, const ObjectValidators& v, uint64_t offset,
                           uint64_t length, std::vector<uint8_t>* out) {
  if (offset > v.size || length > v.size - offset) return false;
  std::string file;
  uint64_t file_bytes = 0;
  if (!FindEntry(key, v, &file, &file_bytes)) return false;
  UniqueFd fd(::open(absl::StrCat(options_.dir, "/", file).c_str(), O_RDONLY | O_CLOEXEC));
  bool ok = fd.get() >= 0 && file_bytes >= sizeof(Footer);
  Footer f{};
  if (ok) {
    ok = PreadAll(fd.get(), reinterpret_cast<uint8_t*>(&f), sizeof(f), file_bytes - sizeof(f)) ==
             0 &&
         f.magic == kMagic && f.data_size == v.size &&
         f.meta_size == file_bytes - sizeof(f) - f.data_size;
  }
  if (ok) {
    std::vector<uint8_t> meta(f.meta_size);
    ok = PreadAll(fd.get(), meta.data(), meta.size(), f.data_size) == 0 &&
         std::string_view(reinterpret_cast<const char*>(meta.data()), meta.size()) == Meta(key, v);
  }
  if (ok) {
    out->resize(length);
    ok = PreadAll(fd.get(), out->data(), length, offset) == 0;
  }
  if (!ok) return false;
  MutexLock lock(&mu_);
  ++counters_.hits;
  counters_.bytes_from_cache += length;
  eviction_->Touched(std::string(key));
  return true;
}

void ObjectCache::MarkFresh(std::string_view key, const ObjectValidators& v, uint64_t until_ns) {
  MutexLock lock(&mu_);
  auto it = entries_.find(std::string(key));
  if (it != entries_.end() && it->second.validators == v) it->second.fresh_until_ns = until_ns;
}

std::optional<ObjectValidators> ObjectCache::FreshValidators(std::string_view key,
                                                             uint64_t now_ns) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(std::string(key));
  if (it == entries_.end() || it->second.fresh_until_ns <= now_ns) return std::nullopt;
  return it->second.validators;
}

bool ObjectCache::Contains(std::string_view key) const {
  MutexLock lock(&mu_);
  return entries_.count(std::string(key)) != 0;
}

std::optional<ObjectValidators> ObjectCache::ValidatorsOf(std::string_view key) const {
  MutexLock lock(&mu_);
  auto it = entries_.find(std::string(key));
  if (it == entries_.end()) return std::nullopt;
  return it->second.validators;
}

void ObjectCache::CountMiss(uint64_t reads, uint64_t network_bytes) {
  MutexLock lock(&mu_);
  counters_.misses += reads;
  counters_.bytes_from_network += network_bytes;
}

void ObjectCache::RemoveLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  held_ -= it->second.file_bytes;
  eviction_->Removed(key);
  entries_.erase(it);
}

void ObjectCache::Put(std::string_view key_view, const ObjectValidators& v,
                      std::span<const uint8_t> bytes) {
  const std::string key(key_view);
  if (bytes.size() != v.size ||
      key.size() + v.etag.size() + v.last_modified.size() + 2 > kMaxMetaBytes) {
    return;
  }
  const uint64_t file_bytes =
      bytes.size() + key.size() + v.etag.size() + v.last_modified.size() + 2 + sizeof(Footer);
  const std::string file = EntryFile(key);
  std::vector<std::string> victims;
  bool replaced = false;
  bool admitted = false;
  {
    MutexLock lock(&mu_);
    if (counters_.read_only) return;
    if (auto it = entries_.find(key); it != entries_.end()) {
      if (it->second.validators == v) return;  // another fill put it there
      RemoveLocked(key);  // replaced: its file is renamed over (or removed below)
      replaced = true;
    }
    admitted = eviction_->Admit(file_bytes, held_ + reserved_, options_.max_bytes);
    while (admitted && held_ + reserved_ + file_bytes > options_.max_bytes) {
      std::optional<std::string> victim = eviction_->Victim();
      if (!victim.has_value()) {
        admitted = false;  // (room held by Puts writing now)
        break;
      }
      victims.push_back(entries_[*victim].file);
      RemoveLocked(*victim);
      ++counters_.evictions;
    }
    if (admitted) reserved_ += file_bytes;
  }
  for (const std::string& f : victims) {
    if (f != file) ::unlink(absl::StrCat(options_.dir, "/", f).c_str());
  }
  if (!admitted) {
    // Not kept; the older version it replaced is no entry any more: its file goes.
    MutexLock lock(&mu_);
    if (replaced && entries_.count(key) == 0) {
      ::unlink(absl::StrCat(options_.dir, "/", file).c_str());
    }
    return;
  }
  const bool written = WriteEntry(key, v, bytes, file);
  MutexLock lock(&mu_);
  reserved_ -= file_bytes;
  if (!written) {
    // The older version's file, no longer an entry, would hold disk outside
    // the budget until the next start (unless a concurrent Put kept the key).
    if (replaced && entries_.count(key) == 0) {
      ::unlink(absl::StrCat(options_.dir, "/", file).c_str());
    }
    return;
  }
  RemoveLocked(key);  // a concurrent Put of the key (its file was renamed over)
  entries_[key] = Entry{file, v, file_bytes};
  held_ += file_bytes;
  eviction_->Added(key, file_bytes);
  ++counters_.fills;
}

bool ObjectCache::WriteEntry(const std::string& key, const ObjectValidators& v,
                             std::span<const uint8_t> bytes, const std::string& file) {
  uint64_t seq = 0;
  {
    MutexLock lock(&mu_);
    seq = ++temp_seq_;
  }
  const std::string temp =
      absl::StrCat(options_.dir, "/", kTempPrefix, ::getpid(), ".", seq, ".", file);
  const std::string meta = Meta(key, v);
  const Footer footer{bytes.size(), meta.size(), CacheChecksum(bytes), kMagic};
  absl::Status st;
  int error = 0;
  {
    UniqueFd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      error = errno;
      st = PosixError(absl::StrCat("creating ", temp), error);
    } else {
      st = writer_->Write(fd.get(), bytes);
      if (st.ok()) {
        st = writer_->Write(
            fd.get(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(meta.data()), meta.size()));
      }
      if (st.ok()) {
        st = writer_->Write(
            fd.get(),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&footer), sizeof(footer)));
      }
      if (st.ok() && options_.fsync && ::fsync(fd.get()) != 0) {
        error = errno;
        st = PosixError(absl::StrCat("fsync ", temp), error);
      }
    }
  }
  if (st.ok() && ::rename(temp.c_str(), absl::StrCat(options_.dir, "/", file).c_str()) != 0) {
    error = errno;
    st = PosixError(absl::StrCat("rename ", temp), error);
  }
  if (st.ok() && options_.fsync) {
    UniqueFd dir(::open(options_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() >= 0) ::fsync(dir.get());
  }
  if (st.ok()) return true;
  ::unlink(temp.c_str());
  const bool full = DiskFull(error) || absl::StrContains(st.message(), std::strerror(ENOSPC)) ||
                    absl::StrContains(st.message(), std::strerror(EDQUOT));
  MutexLock lock(&mu_);
  if (full) {
    if (!counters_.read_only) {
      counters_.read_only = true;
      spdlog::warn(
          "cache {}: the disk is full ({}); the cache serves what it holds and keeps nothing "
          "new until the daemon restarts",
          options_.dir, std::string(st.message()));
    }
  } else if (counters_.fills % 1024 == 0) {
    spdlog::warn("cache {}: an entry was not kept: {}", options_.dir, std::string(st.message()));
  }
  return false;
}

ObjectCache::Counters ObjectCache::counters() const {
  MutexLock lock(&mu_);
  Counters c = counters_;
  c.bytes_held = held_;
  c.entries = entries_.size();
  return c;
}

}  // namespace conveyor::remote
