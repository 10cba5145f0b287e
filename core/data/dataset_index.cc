// Loading of the dataset index (ImageFolder trees, list files) into its
// compact form. See dataset_index.h.
#include "core/data/dataset_index.h"

#include "core/data/media_extensions.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/base/text_escape.h"
#include "core/base/unique_fd.h"
#include "core/data/file_reader.h"
#include "core/data/list_columns.h"

namespace conveyor {
namespace {

// Owns a DIR* stream.
struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};
using UniqueDir = std::unique_ptr<DIR, DirCloser>;

// Debian's abseil has its own string_view type (not std::string_view).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

absl::Status ErrnoStatus(int err, absl::string_view what, absl::string_view path) {
  return PosixError(absl::StrCat(what, " '", path, "'"), err);
}

// Strips trailing '/' (keeping a lone "/").
std::string NormalizeRoot(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

// The directory part of `path` ("." when it has none).
std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// OK when `path` is an existing directory; NotFound / InvalidArgument else.
absl::Status CheckDirectory(const std::string& path, absl::string_view role) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(role, " '", path, "' does not exist"));
    }
    return ErrnoStatus(err, absl::StrCat("cannot stat ", role), path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(role, " '", path, "' is not a directory"));
  }
  return absl::OkStatus();
}

// Reads a whole list file into a string with as few read() calls as
// possible. Opened with O_NONBLOCK and refused unless a regular file, so a
// FIFO cannot block the load. (Sample files go through core/data/file_reader.h.)
absl::StatusOr<std::string> ReadListFile(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat("list file '", path, "' does not exist"));
    }
    return ErrnoStatus(err, "cannot open list file", path);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "cannot stat list file", path);
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("list file '", path, "' is a directory"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("list file '", path, "' is not a regular file (",
                                                   FileTypeName(st.st_mode), ")"));
  }
  std::string data;
  // st_size + 1 so the read that sees EOF needs no growth; grow as needed if
  // the file grows meanwhile.
  data.resize(static_cast<size_t>(st.st_size) + 1);
  size_t filled = 0;
  for (;;) {
    if (filled == data.size()) data.resize(data.size() * 2);
    const ssize_t n = ::read(fd.get(), data.data() + filled, data.size() - filled);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read list file", path);
    }
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  data.resize(filled);
  return data;
}

// The dataset root folder, opened to address samples relative to it.
absl::StatusOr<UniqueFd> OpenRoot(const std::string& root) {
  UniqueFd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, "cannot open dataset root", root);
  return fd;
}

enum class EntryType { kDirectory, kOther };

// The type of directory entry `entry` of the folder `dir_fd`, never
// following a symbolic link (a link is kOther, whatever it points to).
EntryType TypeOf(int dir_fd, const struct dirent* entry) {
  switch (entry->d_type) {
    case DT_DIR: return EntryType::kDirectory;
    case DT_UNKNOWN: break;  // the file system gave no type: ask, without following links
    default: return EntryType::kOther;
  }
  struct stat st;
  if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) return EntryType::kOther;
  return S_ISDIR(st.st_mode) ? EntryType::kDirectory : EntryType::kOther;
}

// Lists the non-hidden entries of the folder `name` of `parent_fd` (a real
// folder: O_NOFOLLOW) of type `want`, sorted by bytes. Names for which `keep`
// is false are skipped before any stat(). `shown` names the folder in errors.
// Entries left out are counted in `ignored` as `prefix` + name: hidden ones
// as kHidden, those of another type as `wrong_type`, those `keep` refused as
// `refused` (kNestedFolder instead when the file system says, without a
// stat, that they are folders).
template <typename Keep>
absl::StatusOr<std::vector<std::string>> ListDirectory(int parent_fd, const char* name,
                                                       const std::string& shown, EntryType want,
                                                       Keep keep, std::string_view prefix,
                                                       IgnoredEntries::Reason refused,
                                                       IgnoredEntries::Reason wrong_type,
                                                       IgnoredEntries* ignored) {
  auto ignore = [&](IgnoredEntries::Reason reason, std::string_view entry_name) {
    std::string path(prefix);
    path.append(entry_name);
    ignored->Add(reason, path);
  };
  // A new open file description each time (not a dup: its offset is shared).
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open directory", shown);
  UniqueDir dir(::fdopendir(fd));
  if (dir == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot open directory", shown);
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const struct dirent* entry = ::readdir(dir.get());
    if (entry == nullptr) {
      if (errno != 0) return ErrnoStatus(errno, "cannot read directory", shown);
      break;
    }
    const std::string_view entry_name(entry->d_name);
    if (entry_name == "." || entry_name == "..") continue;
    if (entry_name.empty() || entry_name[0] == '.') {
      ignore(IgnoredEntries::kHidden, entry_name);
      continue;
    }
    if (!keep(entry_name)) {
      ignore(entry->d_type == DT_DIR ? IgnoredEntries::kNestedFolder : refused, entry_name);
      continue;
    }
    if (TypeOf(::dirfd(dir.get()), entry) != want) {
      ignore(wrong_type, entry_name);
      continue;
    }
    names.emplace_back(entry_name);
  }
  std::sort(names.begin(), names.end());  // std::string compares as unsigned bytes
  return names;
}

// Parses a non-negative decimal int32 (digits only). False when malformed.
bool ParseLabel(std::string_view text, int32_t* label) {
  if (text.empty() || text.size() > 10) return false;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > std::numeric_limits<int32_t>::max()) return false;
  *label = static_cast<int32_t>(value);
  return true;
}

bool IsBlank(std::string_view line) {
  return line.find_first_not_of(" \t") == std::string_view::npos;
}

// For error messages: the text, cut to a readable length.
std::string Quote(std::string_view text) {
  constexpr size_t kMax = 60;
  if (text.size() <= kMax) return absl::StrCat("'", Sv(text), "'");
  return absl::StrCat("'", Sv(text.substr(0, kMax)), "...'");
}

}  // namespace

void IgnoredEntries::Add(Reason reason, std::string_view relative_path) {
  ++counts[reason];
  // The first names in byte order, whatever order readdir gives.
  std::vector<std::string>& kept = examples[reason];
  std::string name = EscapeText(relative_path, kMaxExampleBytes);
  if (kept.size() == kMaxExamples && !(name < kept.back())) return;
  kept.insert(std::upper_bound(kept.begin(), kept.end(), name), std::move(name));
  if (kept.size() > kMaxExamples) kept.pop_back();
}

uint64_t IgnoredEntries::total() const {
  uint64_t n = 0;
  for (const uint64_t c : counts) n += c;
  return n;
}

const char* IgnoredEntries::ReasonText(Reason reason) {
  switch (reason) {
    case kHidden: return "hidden (name starts with '.')";
    case kNoImageExtension: return "without an image extension";
    case kNotAFolderAtRoot:
      return "directly under the root but not a folder (files, links, special files)";
    case kNestedFolder: return "folders inside class folders (not descended into)";
    case kNumReasons: break;
  }
  return "unknown";
}

std::string IgnoredEntries::Summary() const {
  const uint64_t n = total();
  if (n == 0) return "";
  std::string out = absl::StrCat(n, n == 1 ? " entry" : " entries", " ignored:");
  const char* sep = " ";
  for (int r = 0; r < kNumReasons; ++r) {
    if (counts[r] == 0) continue;
    absl::StrAppend(&out, sep, counts[r], " ", ReasonText(static_cast<Reason>(r)), " (e.g. ");
    for (size_t i = 0; i < examples[r].size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "'" : ", '", examples[r][i], "'");
    }
    absl::StrAppend(&out, counts[r] > examples[r].size() ? ", ...)" : ")");
    sep = "; ";
  }
  return out;
}

absl::Status ValidateRelativePath(std::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  if (path.front() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("absolute path ", Quote(path), " refused (paths are relative to root)"));
  }
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("path contains a NUL byte");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(start, end - start) == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("path ", Quote(path), " has a '..' component (it would escape root)"));
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

namespace {
std::string JoinExtensions(std::span<const std::string_view> extensions) {
  std::string joined;
  for (const std::string_view e : extensions) {
    if (!joined.empty()) joined.push_back(' ');
    joined.append(e);
  }
  return joined;
}
}  // namespace

bool HasImageExtension(std::string_view file_name) {
  return HasExtension(file_name, ImageExtensions());
}

std::string DatasetIndex::FullPath(size_t i) const {
  const std::string rel = relative_path(i);
  std::string full;
  full.reserve(root_.size() + 1 + rel.size());
  full.append(root_);
  if (full.empty() || full.back() != '/') full.push_back('/');
  full.append(rel);
  return full;
}

const std::string& DatasetIndex::ContentDigest() const {
  std::call_once(digest_once_, [this] {
    // Each entry as (path length, path, label), little-endian fixed widths,
    // so no two different indexes hash the same byte string.
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
    std::string buffer;
    auto append_u64 = [&buffer](uint64_t v) {
      for (int i = 0; i < 8; ++i) buffer.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    append_u64(size());
    for (size_t i = 0; i < size(); ++i) {
      const std::string path = relative_path(i);
      append_u64(path.size());
      buffer += path;
      append_u64(static_cast<uint32_t>(label(i)));
      if (buffer.size() >= (64 << 10)) {
        EVP_DigestUpdate(ctx.get(), buffer.data(), buffer.size());
        buffer.clear();
      }
    }
    EVP_DigestUpdate(ctx.get(), buffer.data(), buffer.size());
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &md_len);
    static constexpr char kHex[] = "0123456789abcdef";
    digest_ = "sha256:";
    for (unsigned int i = 0; i < md_len; ++i) {
      digest_.push_back(kHex[md[i] >> 4]);
      digest_.push_back(kHex[md[i] & 0xf]);
    }
  });
  return digest_;
}

size_t DatasetIndex::MemoryBytes() const {
  size_t bytes = sizeof(*this) - sizeof(paths_) + paths_.MemoryBytes() + root_.capacity() +
                 label_bytes_.capacity() + class_names_.capacity() * sizeof(std::string);
  for (const std::string& name : class_names_) bytes += name.capacity();
  return bytes;
}

absl::StatusOr<std::shared_ptr<const DatasetIndex>> DatasetIndex::Finish(
    std::unique_ptr<DatasetIndex> index, FrontCodedPaths::Builder paths,
    const std::vector<int32_t>& labels) {
  int64_t max_label = -1;
  for (const int32_t label : labels) max_label = std::max<int64_t>(max_label, label);
  if (index->class_names_.empty()) {
    index->num_classes_ = static_cast<size_t>(max_label + 1);
  } else {
    if (max_label >= static_cast<int64_t>(index->class_names_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("label ", max_label, " is out of range for ",
                                                     index->class_names_.size(), " class names"));
    }
    index->num_classes_ = index->class_names_.size();
  }
  index->paths_ = paths.Finish();
  index->label_width_ = max_label <= 0xff ? 1 : max_label <= 0xffff ? 2 : 4;
  index->label_bytes_.resize(labels.size() * index->label_width_);
  uint8_t* out = index->label_bytes_.data();
  for (const int32_t label : labels) {
    if (index->label_width_ == 1) {
      *out = static_cast<uint8_t>(label);
    } else if (index->label_width_ == 2) {
      const auto v = static_cast<uint16_t>(label);
      std::memcpy(out, &v, sizeof(v));
    } else {
      std::memcpy(out, &label, sizeof(label));
    }
    out += index->label_width_;
  }
  return std::shared_ptr<const DatasetIndex>(std::move(index));
}

absl::StatusOr<std::shared_ptr<const DatasetIndex>> DatasetIndex::LoadImageFolder(
    const std::string& root_arg, std::span<const std::string_view> extensions) {
  const std::string root = NormalizeRoot(root_arg);
  if (absl::Status s = CheckDirectory(root, "dataset root"); !s.ok()) return s;

  absl::StatusOr<UniqueFd> root_fd = OpenRoot(root);
  if (!root_fd.ok()) return root_fd.status();
  IgnoredEntries ignored;
  absl::StatusOr<std::vector<std::string>> classes = ListDirectory(
      root_fd->get(), ".", root, EntryType::kDirectory, [](std::string_view) { return true; }, "",
      IgnoredEntries::kNotAFolderAtRoot, IgnoredEntries::kNotAFolderAtRoot, &ignored);
  if (!classes.ok()) return classes.status();
  if (classes->empty()) {
    return absl::NotFoundError(absl::StrCat(
        "dataset root '", root, "' has no class folders (expected root/<class>/<file>)"));
  }

  std::unique_ptr<DatasetIndex> index(new DatasetIndex());
  index->root_ = root;
  index->root_fd_ = *std::move(root_fd);
  FrontCodedPaths::Builder paths;
  std::vector<int32_t> labels;
  std::string path;
  for (size_t label = 0; label < classes->size(); ++label) {
    const std::string& class_name = (*classes)[label];
    if (label > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("too many class folders in '", root, "'"));
    }
    const std::string class_dir = absl::StrCat(root, "/", class_name);
    absl::StatusOr<std::vector<std::string>> files = ListDirectory(
        index->root_fd_.get(), class_name.c_str(), class_dir, EntryType::kOther,
        [extensions](std::string_view name) { return HasExtension(name, extensions); },
        class_name + "/", IgnoredEntries::kNoImageExtension, IgnoredEntries::kNestedFolder,
        &ignored);
    if (!files.ok()) return files.status();
    for (const std::string& file : *files) {
      path.assign(class_name);
      path.push_back('/');
      path.append(file);
      paths.Add(path);
      labels.push_back(static_cast<int32_t>(label));
    }
  }
  if (labels.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "dataset root '", root, "' has ", classes->size(), " class folders but no ",
        extensions.data() == ImageExtensions().data()
            ? std::string("image files")
            : absl::StrCat("files with an extension in (", JoinExtensions(extensions), ")")));
  }
  index->class_names_ = *std::move(classes);
  index->ignored_ = std::move(ignored);
  return Finish(std::move(index), std::move(paths), labels);
}

absl::StatusOr<std::shared_ptr<const DatasetIndex>> DatasetIndex::LoadListFile(
    const std::string& list_path, const std::string& root_arg, ListColumns* columns) {
  absl::StatusOr<std::string> data = ReadListFile(list_path);
  if (!data.ok()) return data.status();
  const std::string root = NormalizeRoot(root_arg.empty() ? DirName(list_path) : root_arg);
  if (absl::Status s = CheckDirectory(root, "dataset root"); !s.ok()) return s;
  absl::StatusOr<UniqueFd> root_fd = OpenRoot(root);
  if (!root_fd.ok()) return root_fd.status();

  std::unique_ptr<DatasetIndex> index(new DatasetIndex());
  index->root_ = root;
  index->root_fd_ = *std::move(root_fd);

  // One pass to count lines so the label array is sized exactly.
  const std::string& buf = *data;
  size_t lines = 1;
  for (const char *p = buf.data(), *end = buf.data() + buf.size();
       (p = static_cast<const char*>(std::memchr(p, '\n', end - p))) != nullptr; ++p) {
    ++lines;
  }
  FrontCodedPaths::Builder paths;
  std::vector<int32_t> labels;
  labels.reserve(lines);

  size_t line_start = 0;
  size_t line_number = 0;
  while (line_start < buf.size()) {
    ++line_number;
    const char* nl = static_cast<const char*>(
        std::memchr(buf.data() + line_start, '\n', buf.size() - line_start));
    const size_t line_end = nl == nullptr ? buf.size() : static_cast<size_t>(nl - buf.data());
    std::string_view line(buf.data() + line_start, line_end - line_start);
    const size_t next_start = line_end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#' || IsBlank(line)) {
      line_start = next_start;
      continue;
    }
    auto bad_line = [&](absl::string_view reason) {
      return absl::InvalidArgumentError(absl::StrCat(list_path, ":", line_number, ": ", reason));
    };
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos) {
      return bad_line("missing tab between path and label (expected 'relative/path<TAB>label')");
    }
    const std::string_view path = line.substr(0, tab);
    std::string_view label_text = line.substr(tab + 1);
    std::string_view rest;  // the columns after the label, with their tabs
    if (columns != nullptr) {
      const size_t more = label_text.find('\t');
      if (more != std::string_view::npos) {
        rest = label_text.substr(more);
        label_text = label_text.substr(0, more);
      }
    }
    if (absl::Status s = ValidateRelativePath(path); !s.ok()) return bad_line(s.message());
    int32_t label = 0;
    if (!ParseLabel(label_text, &label)) {
      return bad_line(absl::StrCat("label ", Quote(label_text),
                                   " is not a non-negative integer that fits int32"));
    }
    paths.Add(path);
    labels.push_back(label);
    if (columns != nullptr) columns->AddLine(rest);
    line_start = next_start;
  }
  if (labels.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("list file '", list_path, "' has no entries"));
  }
  *data = std::string();  // the file's bytes go before the index is finished
  return Finish(std::move(index), std::move(paths), labels);
}

absl::StatusOr<std::shared_ptr<const DatasetIndex>> DatasetIndex::FromEntries(
    const std::string& root, const std::vector<Entry>& entries,
    std::vector<std::string> class_names) {
  std::unique_ptr<DatasetIndex> index(new DatasetIndex());
  index->root_ = NormalizeRoot(root);
  index->root_fd_.Reset(::open(index->root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  FrontCodedPaths::Builder paths;
  std::vector<int32_t> labels;
  labels.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (absl::Status s = ValidateRelativePath(e.relative_path); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, ": ", s.message()));
    }
    if (e.label < 0) {
      return absl::InvalidArgumentError(absl::StrCat("entry ", i, ": negative label ", e.label));
    }
    paths.Add(e.relative_path);
    labels.push_back(e.label);
  }
  if (labels.empty()) return absl::InvalidArgumentError("no entries");
  index->class_names_ = std::move(class_names);
  return Finish(std::move(index), std::move(paths), labels);
}

}  // namespace conveyor
