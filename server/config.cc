#include "server/config.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "yaml-cpp/yaml.h"

namespace conveyor::server {

namespace fs = std::filesystem;

namespace {

#define CONVEYOR_RETURN_IF_ERROR(expr)          \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kGiB = kKiB * kKiB * kKiB;

// The memory limit of this process's cgroup (v2 memory.max, or v1
// memory.limit_in_bytes), or 0 when there is none.
uint64_t CgroupMemoryLimit() {
  auto read = [](const std::string& path) -> uint64_t {
    std::ifstream in(path);
    std::string value;
    uint64_t limit = 0;
    if (in >> value && absl::SimpleAtoi(value, &limit)) return limit;  // "max": none
    return 0;
  };
  std::ifstream cgroup("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroup, line)) {
    if (absl::StartsWith(line, "0::")) {
      if (uint64_t l = read("/sys/fs/cgroup" + line.substr(3) + "/memory.max")) return l;
    } else if (const size_t at = line.find(":memory:"); at != std::string::npos) {
      const std::string dir = "/sys/fs/cgroup/memory";
      if (uint64_t l = read(dir + line.substr(at + 8) + "/memory.limit_in_bytes")) return l;
      if (uint64_t l = read(dir + "/memory.limit_in_bytes")) return l;  // namespaced
    }
  }
  return 0;
}

// Physical memory, or the cgroup's limit when that is lower (containers).
uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  uint64_t total =
      pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 4 * kGiB;
  const uint64_t limit = CgroupMemoryLimit();
  if (limit > 0 && limit < total) total = limit;
  return total;
}

// Absolute and lexically normal, without a trailing '/' (unless "/").
std::string NormalPath(const fs::path& p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string Resolve(const std::string& base_dir, const std::string& p) {
  fs::path path(p);
  if (path.is_relative()) path = fs::path(base_dir) / path;
  return NormalPath(path);
}

// The path with symlinks of its existing prefix resolved (so a link inside an
// allowed root cannot point outside it).
std::string Canonical(const std::string& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::path(p), ec);
  if (ec) return p;
  return NormalPath(c);
}

// What a node holds, for messages.
std::string Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Scalar:
      return absl::StrCat("'", n.Scalar(), "'");
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
  }
  return "?";
}

bool ValidPipelineName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  if (!absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// One pass over the YAML tree. Every Read* reports the first problem as
// "FILE: field PATH: reason (line N)".
class Parser {
 public:
  Parser(std::string file, std::string base_dir)
      : file_(std::move(file)), base_dir_(std::move(base_dir)) {}

  absl::Status Error(const std::string& field, const YAML::Node& n, const std::string& why) const {
    std::string where;
    if (n.IsDefined() && n.Mark().line >= 0)
      where = absl::StrCat(" (line ", n.Mark().line + 1, ")");
    return absl::InvalidArgumentError(absl::StrCat(file_, ": field ", field, ": ", why, where));
  }

  // `n` must be a map whose keys are all in `allowed`, each at most once.
  absl::Status CheckMap(const YAML::Node& n, const std::string& field,
                        const std::vector<std::string>& allowed) const {
    if (!n.IsMap()) return Error(field, n, absl::StrCat("expected a map, got ", Describe(n)));
    std::set<std::string> seen;
    for (const auto& kv : n) {
      if (!kv.first.IsScalar()) return Error(field, kv.first, "keys must be plain names");
      const std::string key = kv.first.Scalar();
      const std::string sub = Join(field, key);
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        return Error(sub, kv.first,
                     absl::StrCat("unknown field (known: ", absl::StrJoin(allowed, ", "), ")"));
      }
      if (!seen.insert(key).second) return Error(sub, kv.first, "given twice");
    }
    return absl::OkStatus();
  }

  static std::string Join(const std::string& field, const std::string& key) {
    return field.empty() ? key : absl::StrCat(field, ".", key);
  }

  absl::Status Scalar(const YAML::Node& n, const std::string& field, const char* expected) const {
    if (!n.IsScalar()) {
      return Error(field, n, absl::StrCat("expected ", expected, ", got ", Describe(n)));
    }
    return absl::OkStatus();
  }

  absl::Status ReadUint(const YAML::Node& n, const std::string& field, uint64_t lo, uint64_t hi,
                        uint64_t* out) const {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n, field, "an integer"));
    const std::string s(absl::StripAsciiWhitespace(n.Scalar()));
    uint64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || absl::StartsWith(s, "+")) {
      int64_t neg = 0;
      if (absl::SimpleAtoi(s, &neg) && neg < 0) {
        return Error(field, n, absl::StrCat("must not be negative, got ", s));
      }
      return Error(field, n, absl::StrCat("expected an integer, got ", Describe(n)));
    }
    if (v < lo || v > hi) {
      return Error(field, n, absl::StrCat("must be within [", lo, ", ", hi, "], got ", v));
    }
    *out = v;
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status ReadUintAs(const YAML::Node& n, const std::string& field, uint64_t lo, uint64_t hi,
                          T* out) const {
    uint64_t v = 0;
    CONVEYOR_RETURN_IF_ERROR(ReadUint(n, field, lo, hi, &v));
    *out = static_cast<T>(v);
    return absl::OkStatus();
  }

  absl::Status ReadDouble(const YAML::Node& n, const std::string& field, double lo, double hi,
                          double* out) const {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n, field, "a number"));
    const std::string s(absl::StripAsciiWhitespace(n.Scalar()));
    double v = 0;
    if (!absl::SimpleAtod(s, &v) || !std::isfinite(v)) {
      return Error(field, n, absl::StrCat("expected a number, got ", Describe(n)));
    }
    if (v < lo || v > hi) {
      return Error(field, n, absl::StrFormat("must be within [%g, %g], got %g", lo, hi, v));
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status ReadBool(const YAML::Node& n, const std::string& field, bool* out) const {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n, field, "true or false"));
    const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(n.Scalar()));
    if (s == "true" || s == "yes" || s == "on") {
      *out = true;
    } else if (s == "false" || s == "no" || s == "off") {
      *out = false;
    } else {
      return Error(field, n, absl::StrCat("expected true or false, got ", Describe(n)));
    }
    return absl::OkStatus();
  }

  absl::Status ReadString(const YAML::Node& n, const std::string& field, std::string* out) const {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n, field, "a string"));
    *out = n.Scalar();
    return absl::OkStatus();
  }

  // One of `names` (case-insensitive); *out is its index.
  absl::Status ReadEnum(const YAML::Node& n, const std::string& field,
                        const std::vector<std::string>& names, int* out) const {
    CONVEYOR_RETURN_IF_ERROR(
        Scalar(n, field, absl::StrCat("one of ", absl::StrJoin(names, ", ")).c_str()));
    const std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(n.Scalar()));
    for (size_t i = 0; i < names.size(); ++i) {
      if (s == names[i]) {
        *out = static_cast<int>(i);
        return absl::OkStatus();
      }
    }
    return Error(
        field, n,
        absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ", Describe(n)));
  }

  absl::Status ReadSize(const YAML::Node& n, const std::string& field, bool allow_percent,
                        uint64_t lo, uint64_t* out) const {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n, field, "a size such as 2GiB"));
    absl::StatusOr<uint64_t> v = ParseByteSize(n.Scalar(), allow_percent);
    if (!v.ok()) return Error(field, n, std::string(v.status().message()));
    if (*v < lo) {
      return Error(field, n, absl::StrCat("must be at least ", lo, " bytes, got ", n.Scalar()));
    }
    *out = *v;
    return absl::OkStatus();
  }

  // A list of exactly `count` numbers in [lo, hi].
  absl::Status ReadNumbers(const YAML::Node& n, const std::string& field, size_t count, double lo,
                           double hi, std::vector<double>* out) const {
    if (!n.IsSequence() || n.size() != count) {
      return Error(field, n,
                   absl::StrCat("expected a list of ", count, " numbers, got ",
                                n.IsSequence() ? absl::StrCat(n.size(), " items") : Describe(n)));
    }
    out->clear();
    for (size_t i = 0; i < count; ++i) {
      double v = 0;
      CONVEYOR_RETURN_IF_ERROR(ReadDouble(n[i], absl::StrCat(field, "[", i, "]"), lo, hi, &v));
      out->push_back(v);
    }
    return absl::OkStatus();
  }

  absl::Status ReadPath(const YAML::Node& n, const std::string& field, std::string* out) const {
    std::string s;
    CONVEYOR_RETURN_IF_ERROR(ReadString(n, field, &s));
    if (s.empty()) return Error(field, n, "must not be empty");
    if (s.find('\0') != std::string::npos) return Error(field, n, "contains a NUL byte");
    *out = Resolve(base_dir_, s);
    return absl::OkStatus();
  }

  absl::Status ParseTop(const YAML::Node& root, DaemonConfig* c) const;
  absl::Status ParseListen(const YAML::Node& n, ListenConfig* l) const;
  absl::Status ParseEngine(const YAML::Node& n, EngineOptions* e) const;
  absl::Status ParsePipeline(const std::string& name, const YAML::Node& n, const DaemonConfig& c,
                             PipelineSpec* p) const;
  absl::Status ParseDataset(const std::string& field, const YAML::Node& n, DatasetSpec* d) const;

  const std::string& file() const { return file_; }

 private:
  const std::string file_;
  const std::string base_dir_;
};

absl::Status ParseUnixMode(const std::string& text, mode_t* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (absl::StartsWith(s, "0o") || absl::StartsWith(s, "0O")) s = s.substr(2);
  if (s.empty() || s.size() > 4 ||
      !std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '7'; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected an octal file mode such as 0660, got '", text, "'"));
  }
  const mode_t mode = static_cast<mode_t>(std::stoul(s, nullptr, 8));
  if (mode > 0777) {
    return absl::InvalidArgumentError(absl::StrCat("mode '", text, "' has bits beyond 0777"));
  }
  if ((mode & 0600) != 0600) {
    return absl::InvalidArgumentError(
        absl::StrCat("mode '", text, "' must let the owner read and write (0600 at least)"));
  }
  if ((mode & 0007) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mode '", text, "' must not grant access to others; share the socket through a group"));
  }
  *out = mode;
  return absl::OkStatus();
}

absl::Status ValidateTcpAddress(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected host:port (e.g. 0.0.0.0:7070 or [::1]:0), got '", addr, "'"));
  }
  const std::string host = addr.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return absl::InvalidArgumentError(absl::StrCat("unbalanced brackets in '", addr, "'"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(addr.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port of '", addr, "' must be an integer within [0, 65535]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateUnixPath(const std::string& path) {
  // sun_path holds 108 bytes with the NUL; the ".fd" sibling needs 3 more.
  if (path.size() + 3 >= 108) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", path, "' is too long (",
                                                   path.size(), " bytes; at most 104)"));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseListen(const YAML::Node& n, ListenConfig* l) const {
  CONVEYOR_RETURN_IF_ERROR(CheckMap(n, "listen", {"unix", "unix_mode", "tcp", "data_tcp"}));
  if (n["unix"]) {
    std::string s;
    CONVEYOR_RETURN_IF_ERROR(ReadString(n["unix"], "listen.unix", &s));
    l->unix_path = s.empty() ? "" : Resolve(base_dir_, s);
    if (!l->unix_path.empty()) {
      if (absl::Status st = ValidateUnixPath(l->unix_path); !st.ok()) {
        return Error("listen.unix", n["unix"], std::string(st.message()));
      }
    }
  }
  if (n["unix_mode"]) {
    CONVEYOR_RETURN_IF_ERROR(Scalar(n["unix_mode"], "listen.unix_mode", "an octal mode"));
    if (absl::Status st = ParseUnixMode(n["unix_mode"].Scalar(), &l->unix_mode); !st.ok()) {
      return Error("listen.unix_mode", n["unix_mode"], std::string(st.message()));
    }
  }
  if (n["tcp"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadString(n["tcp"], "listen.tcp", &l->tcp));
    if (!l->tcp.empty()) {
      if (absl::Status st = ValidateTcpAddress(l->tcp); !st.ok()) {
        return Error("listen.tcp", n["tcp"], std::string(st.message()));
      }
    }
  }
  if (n["data_tcp"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadString(n["data_tcp"], "listen.data_tcp", &l->data_tcp));
    if (!l->data_tcp.empty() && l->data_tcp != "none") {
      if (absl::Status st = ValidateTcpAddress(l->data_tcp); !st.ok()) {
        return Error("listen.data_tcp", n["data_tcp"], std::string(st.message()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseEngine(const YAML::Node& n, EngineOptions* e) const {
  CONVEYOR_RETURN_IF_ERROR(
      CheckMap(n, "engine", {"fetch_queue_capacity", "fetch_concurrency", "decode_concurrency"}));
  if (n["fetch_queue_capacity"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadUintAs(n["fetch_queue_capacity"], "engine.fetch_queue_capacity", 0,
                                        65536, &e->fetch_queue_capacity));
  }
  if (n["fetch_concurrency"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadUintAs(n["fetch_concurrency"], "engine.fetch_concurrency", 1, 4096,
                                        &e->fetch_concurrency));
  }
  if (n["decode_concurrency"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadUintAs(n["decode_concurrency"], "engine.decode_concurrency", 0,
                                        4096, &e->decode_concurrency));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseDataset(const std::string& field, const YAML::Node& n,
                                  DatasetSpec* d) const {
  CONVEYOR_RETURN_IF_ERROR(CheckMap(n, field, {"root", "list"}));
  if (n["list"]) {
    d->kind = DatasetSpec::Kind::kListFile;
    CONVEYOR_RETURN_IF_ERROR(ReadPath(n["list"], field + ".list", &d->list));
    if (n["root"]) CONVEYOR_RETURN_IF_ERROR(ReadPath(n["root"], field + ".root", &d->root));
  } else if (n["root"]) {
    d->kind = DatasetSpec::Kind::kImageFolder;
    CONVEYOR_RETURN_IF_ERROR(ReadPath(n["root"], field + ".root", &d->root));
  } else {
    return Error(
        field, n,
        "needs `root` (an ImageFolder tree) or `list` (a list file, with optional `root`)");
  }
  return absl::OkStatus();
}

const std::vector<std::string> kPipelineFields = {"dataset",
                                                  "augment",
                                                  "size",
                                                  "height",
                                                  "width",
                                                  "layout",
                                                  "dtype",
                                                  "mean",
                                                  "std",
                                                  "scale",
                                                  "ratio",
                                                  "flip_probability",
                                                  "resize_size",
                                                  "dct_scaling",
                                                  "max_pixels",
                                                  "max_batch_size",
                                                  "error_policy",
                                                  "max_failure_rate",
                                                  "failure_rate_min_samples",
                                                  "max_file_bytes"};

absl::Status Parser::ParsePipeline(const std::string& name, const YAML::Node& n,
                                   const DaemonConfig& c, PipelineSpec* p) const {
  const std::string f = absl::StrCat("pipelines.", name);
  auto sub = [&](const char* key) { return absl::StrCat(f, ".", key); };
  CONVEYOR_RETURN_IF_ERROR(CheckMap(n, f, kPipelineFields));
  PipelineConfig& pc = p->config;
  TransformSpec& t = pc.transform;
  pc.name = name;

  if (!n["dataset"]) return Error(f, n, "missing `dataset` (give dataset.root or dataset.list)");
  CONVEYOR_RETURN_IF_ERROR(ParseDataset(sub("dataset"), n["dataset"], &p->dataset));
  if (!c.allowed_roots.empty()) {
    // Both the list file and the root samples are read from must lie under an
    // allowed root; symlinks are resolved first so that none leads outside.
    std::vector<std::pair<std::string, std::string>> paths;  // (field, path)
    if (p->dataset.kind == DatasetSpec::Kind::kListFile) {
      paths.push_back({sub("dataset.list"), p->dataset.list});
      paths.push_back({n["dataset"]["root"] ? sub("dataset.root") : sub("dataset.list"),
                       p->dataset.root.empty() ? NormalPath(fs::path(p->dataset.list).parent_path())
                                               : p->dataset.root});
    } else {
      paths.push_back({sub("dataset.root"), p->dataset.root});
    }
    for (const auto& [field, path] : paths) {
      const std::string real = Canonical(path);
      bool ok = false;
      for (const std::string& allowed : c.allowed_roots)
        ok |= PathIsUnder(real, Canonical(allowed));
      if (!ok) {
        const YAML::Node at =
            absl::EndsWith(field, ".list") ? n["dataset"]["list"] : n["dataset"]["root"];
        return Error(
            field, at,
            absl::StrCat("'", path, "'", real != path ? absl::StrCat(" (really '", real, "')") : "",
                         " lies outside the allowed roots [", absl::StrJoin(c.allowed_roots, ", "),
                         "]"));
      }
    }
  }

  int e = 0;
  if (n["augment"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadEnum(n["augment"], sub("augment"), {"train", "eval"}, &e));
    t.mode = e == 0 ? AugmentMode::kTrain : AugmentMode::kEval;
  }
  if (n["size"] && (n["height"] || n["width"])) {
    return Error(sub("size"), n["size"], "give either `size` or `height`/`width`, not both");
  }
  constexpr uint64_t kMaxSide = 16384;
  if (n["size"]) {
    const YAML::Node s = n["size"];
    if (s.IsSequence()) {
      if (s.size() != 2) {
        return Error(sub("size"), s,
                     absl::StrCat("expected [height, width], got ", s.size(), " items"));
      }
      CONVEYOR_RETURN_IF_ERROR(ReadUintAs(s[0], sub("size[0]"), 1, kMaxSide, &t.output_height));
      CONVEYOR_RETURN_IF_ERROR(ReadUintAs(s[1], sub("size[1]"), 1, kMaxSide, &t.output_width));
    } else {
      CONVEYOR_RETURN_IF_ERROR(ReadUintAs(s, sub("size"), 1, kMaxSide, &t.output_height));
      t.output_width = t.output_height;
    }
  }
  if (n["height"])
    CONVEYOR_RETURN_IF_ERROR(ReadUintAs(n["height"], sub("height"), 1, kMaxSide, &t.output_height));
  if (n["width"])
    CONVEYOR_RETURN_IF_ERROR(ReadUintAs(n["width"], sub("width"), 1, kMaxSide, &t.output_width));
  if (n["layout"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadEnum(n["layout"], sub("layout"), {"nchw", "nhwc"}, &e));
    t.layout = e == 0 ? Layout::kNCHW : Layout::kNHWC;
  }
  if (n["dtype"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadEnum(n["dtype"], sub("dtype"), {"uint8", "float32", "float16"}, &e));
    t.dtype = e == 0 ? DType::kUint8 : e == 1 ? DType::kFloat32 : DType::kFloat16;
  }
  std::vector<double> v;
  if (n["mean"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadNumbers(n["mean"], sub("mean"), 3, -1e6, 1e6, &v));
    for (int i = 0; i < 3; ++i) t.mean[i] = static_cast<float>(v[i]);
  }
  if (n["std"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadNumbers(n["std"], sub("std"), 3, 1e-12, 1e6, &v));
    for (int i = 0; i < 3; ++i) t.std[i] = static_cast<float>(v[i]);
  }
  if (n["scale"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadNumbers(n["scale"], sub("scale"), 2, 1e-9, 1.0, &v));
    if (v[0] > v[1]) return Error(sub("scale"), n["scale"], "min must not exceed max");
    t.scale_min = v[0];
    t.scale_max = v[1];
  }
  if (n["ratio"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadNumbers(n["ratio"], sub("ratio"), 2, 1e-9, 1e9, &v));
    if (v[0] > v[1]) return Error(sub("ratio"), n["ratio"], "min must not exceed max");
    t.ratio_min = v[0];
    t.ratio_max = v[1];
  }
  if (n["flip_probability"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadDouble(n["flip_probability"], sub("flip_probability"), 0, 1, &t.flip_probability));
  }
  if (n["resize_size"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadUintAs(n["resize_size"], sub("resize_size"), 1, kMaxSide, &t.resize_size));
    if (t.mode == AugmentMode::kEval &&
        (t.resize_size < t.output_height || t.resize_size < t.output_width)) {
      return Error(sub("resize_size"), n["resize_size"],
                   absl::StrCat("must be at least the output size in eval mode (", t.output_height,
                                "x", t.output_width, "; no padding), got ", t.resize_size));
    }
  } else {
    // torchvision's convention: resize to size/0.875 (224 → 256) before the
    // centre crop.
    const int side = std::max(t.output_height, t.output_width);
    t.resize_size = std::min<int>(kMaxSide, (side * 256 + 223) / 224);
  }
  if (n["dct_scaling"])
    CONVEYOR_RETURN_IF_ERROR(ReadBool(n["dct_scaling"], sub("dct_scaling"), &t.dct_scaling));
  if (n["max_pixels"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadUint(n["max_pixels"], sub("max_pixels"), 1, uint64_t{1} << 40, &t.max_pixels));
  }
  if (n["max_batch_size"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadUintAs(n["max_batch_size"], sub("max_batch_size"), 1, 65536, &pc.max_batch_size));
  }
  if (n["error_policy"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadEnum(n["error_policy"], sub("error_policy"), {"skip", "fail_fast"}, &e));
    pc.error_policy = e == 0 ? ErrorPolicy::kSkip : ErrorPolicy::kFailFast;
  }
  if (n["max_failure_rate"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadDouble(n["max_failure_rate"], sub("max_failure_rate"), 0, 1, &pc.max_failure_rate));
  }
  if (n["failure_rate_min_samples"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadUint(n["failure_rate_min_samples"],
                                      sub("failure_rate_min_samples"), 0, uint64_t{1} << 40,
                                      &pc.failure_rate_min_samples));
  }
  if (n["max_file_bytes"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadSize(n["max_file_bytes"], sub("max_file_bytes"), false, 1, &pc.max_file_bytes));
  }

  // The core's own check, as the last word (names the transform field).
  if (absl::Status st = ValidateTransformSpec(t); !st.ok()) {
    return Error(f, n, std::string(st.message()));
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseTop(const YAML::Node& root, DaemonConfig* c) const {
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": expected a map of settings at the top, got ", Describe(root)));
  }
  CONVEYOR_RETURN_IF_ERROR(
      CheckMap(root, "",
               {"listen", "threads", "memory_budget", "max_streams", "allowed_roots", "log_level",
                "shutdown_timeout_seconds", "engine", "pipelines"}));
  if (root["listen"]) CONVEYOR_RETURN_IF_ERROR(ParseListen(root["listen"], &c->listen));
  if (root["threads"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadUintAs(root["threads"], "threads", 0, 1024, &c->engine.num_threads));
  }
  if (root["engine"]) CONVEYOR_RETURN_IF_ERROR(ParseEngine(root["engine"], &c->engine));
  c->memory_budget = DefaultMemoryBudget();
  if (root["memory_budget"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadSize(root["memory_budget"], "memory_budget", true, 1 << 20, &c->memory_budget));
  }
  if (root["max_streams"]) {
    CONVEYOR_RETURN_IF_ERROR(
        ReadUintAs(root["max_streams"], "max_streams", 1, 100000, &c->max_streams));
  }
  if (root["log_level"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadString(root["log_level"], "log_level", &c->log_level));
    if (absl::Status st = ValidateLogLevel(c->log_level); !st.ok()) {
      return Error("log_level", root["log_level"], std::string(st.message()));
    }
  }
  if (root["shutdown_timeout_seconds"]) {
    CONVEYOR_RETURN_IF_ERROR(ReadDouble(root["shutdown_timeout_seconds"],
                                        "shutdown_timeout_seconds", 0, 3600,
                                        &c->shutdown_timeout_seconds));
  }
  if (root["allowed_roots"]) {
    const YAML::Node ar = root["allowed_roots"];
    if (!ar.IsSequence()) {
      return Error("allowed_roots", ar,
                   absl::StrCat("expected a list of directories, got ", Describe(ar)));
    }
    for (size_t i = 0; i < ar.size(); ++i) {
      std::string p;
      CONVEYOR_RETURN_IF_ERROR(ReadPath(ar[i], absl::StrCat("allowed_roots[", i, "]"), &p));
      c->allowed_roots.push_back(p);
    }
  }

  const YAML::Node pl = root["pipelines"];
  if (!pl || pl.IsNull() || (pl.IsMap() && pl.size() == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_, ": field pipelines: no pipelines defined (at least one is needed)"));
  }
  if (!pl.IsMap()) {
    return Error("pipelines", pl,
                 absl::StrCat("expected a map of name: settings, got ", Describe(pl)));
  }
  std::set<std::string> names;
  for (const auto& kv : pl) {
    if (!kv.first.IsScalar())
      return Error("pipelines", kv.first, "pipeline names must be plain names");
    const std::string name = kv.first.Scalar();
    if (!ValidPipelineName(name)) {
      return Error(absl::StrCat("pipelines.", name), kv.first,
                   "a pipeline name is 1-128 letters, digits, '-', '_' or '.', starting with a "
                   "letter or digit");
    }
    if (!names.insert(name).second) {
      return Error(absl::StrCat("pipelines.", name), kv.first, "duplicate pipeline name");
    }
    PipelineSpec spec;
    CONVEYOR_RETURN_IF_ERROR(ParsePipeline(name, kv.second, *c, &spec));
    c->pipelines.push_back(std::move(spec));
  }
  return ValidateDaemonFields(*c);
}

}  // namespace

std::string DatasetSpec::Key() const {
  return kind == Kind::kImageFolder ? absl::StrCat("folder:", root)
                                    : absl::StrCat("list:", list, "\n", root);
}

uint64_t DefaultMemoryBudget() {
  return std::clamp<uint64_t>(PhysicalMemory() / 4, 256 * kKiB * kKiB, 16 * kGiB);
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& text, bool allow_percent) {
  const std::string s(absl::StripAsciiWhitespace(text));
  size_t i = 0;
  while (i < s.size() && (absl::ascii_isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.' ||
                          s[i] == '-' || s[i] == '+')) {
    ++i;
  }
  const std::string number = s.substr(0, i);
  const std::string unit(absl::StripAsciiWhitespace(s.substr(i)));
  double v = 0;
  if (number.empty() || !absl::SimpleAtod(number, &v) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a size such as 512MiB or 2GiB, got '", text, "'"));
  }
  if (v < 0 || number[0] == '-') {
    return absl::InvalidArgumentError(absl::StrCat("size must not be negative, got '", text, "'"));
  }
  static const std::map<std::string, double> kUnits = {
      {"", 1},         {"b", 1},       {"k", 0x1p10},   {"ki", 0x1p10},  {"kib", 0x1p10},
      {"m", 0x1p20},   {"mi", 0x1p20}, {"mib", 0x1p20}, {"g", 0x1p30},   {"gi", 0x1p30},
      {"gib", 0x1p30}, {"t", 0x1p40},  {"ti", 0x1p40},  {"tib", 0x1p40}, {"kb", 1e3},
      {"mb", 1e6},     {"gb", 1e9},    {"tb", 1e12}};
  double bytes = 0;
  if (unit == "%") {
    if (!allow_percent) {
      return absl::InvalidArgumentError(
          absl::StrCat("a percentage is not allowed here: '", text, "'"));
    }
    if (v <= 0 || v > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("percentage must be within (0, 100], got '", text, "'"));
    }
    bytes = static_cast<double>(PhysicalMemory()) * v / 100.0;
  } else {
    auto it = kUnits.find(absl::AsciiStrToLower(unit));
    if (it == kUnits.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown unit '", unit, "' in '", text, "' (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB",
          allow_percent ? ", or N%" : "", ")"));
    }
    bytes = v * it->second;
  }
  if (bytes >= 0x1p63)
    return absl::InvalidArgumentError(absl::StrCat("size '", text, "' is too large"));
  return static_cast<uint64_t>(std::llround(bytes));
}

absl::Status ValidateLogLevel(const std::string& level) {
  static const std::set<std::string> kLevels = {"trace",   "debug", "info",     "warn",
                                                "warning", "error", "critical", "off"};
  if (kLevels.count(level) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "' (trace, debug, info, warn, error, critical, off)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDaemonFields(const DaemonConfig& c) {
  auto bad = [&](const std::string& field, const absl::Status& st) {
    return absl::InvalidArgumentError(
        absl::StrCat(c.source, ": field ", field, ": ", st.message()));
  };
  if (c.listen.unix_path.empty() && c.listen.tcp.empty()) {
    return bad("listen", absl::InvalidArgumentError("needs a unix socket, a TCP address or both"));
  }
  if (!c.listen.unix_path.empty()) {
    if (absl::Status st = ValidateUnixPath(c.listen.unix_path); !st.ok())
      return bad("listen.unix", st);
  }
  if (!c.listen.tcp.empty()) {
    if (absl::Status st = ValidateTcpAddress(c.listen.tcp); !st.ok()) return bad("listen.tcp", st);
  }
  if (!c.listen.data_tcp.empty() && c.listen.data_tcp != "none") {
    if (absl::Status st = ValidateTcpAddress(c.listen.data_tcp); !st.ok()) {
      return bad("listen.data_tcp", st);
    }
  }
  if (c.engine.num_threads < 0 || c.engine.num_threads > 1024) {
    return bad("threads", absl::InvalidArgumentError("must be within [0, 1024] (0: one per core)"));
  }
  if (c.memory_budget < (1u << 20)) {
    return bad("memory_budget", absl::InvalidArgumentError("must be at least 1 MiB"));
  }
  if (absl::Status st = ValidateLogLevel(c.log_level); !st.ok()) return bad("log_level", st);
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseConfig(const std::string& yaml, const std::string& file_name,
                                         const std::string& base_dir) {
  DaemonConfig c;
  c.source = file_name;
  Parser parser(file_name, NormalPath(fs::absolute(base_dir)));
  try {
    YAML::Node root = YAML::Load(yaml);
    if (absl::Status st = parser.ParseTop(root, &c); !st.ok()) return st;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s", file_name,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  return c;
}

absl::StatusOr<DaemonConfig> LoadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot read the config file: ", strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  const fs::path abs = fs::absolute(fs::path(path));
  return ParseConfig(text.str(), path, abs.parent_path().string());
}

bool PathIsUnder(const std::string& path, const std::string& root) {
  if (root == "/") return absl::StartsWith(path, "/");
  if (!absl::StartsWith(path, root)) return false;
  return path.size() == root.size() || path[root.size()] == '/';
}

absl::StatusOr<std::vector<std::shared_ptr<const PipelineConfig>>> LoadPipelines(
    const DaemonConfig& config) {
  std::map<std::string, std::shared_ptr<const DatasetIndex>> loaded;
  std::vector<std::shared_ptr<const PipelineConfig>> out;
  for (const PipelineSpec& spec : config.pipelines) {
    const std::string field = absl::StrCat("pipelines.", spec.config.name, ".dataset");
    const DatasetSpec& d = spec.dataset;
    auto it = loaded.find(d.Key());
    if (it == loaded.end()) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::shared_ptr<const DatasetIndex>> index =
          d.kind == DatasetSpec::Kind::kImageFolder ? DatasetIndex::LoadImageFolder(d.root)
                                                    : DatasetIndex::LoadListFile(d.list, d.root);
      if (!index.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config.source, ": field ", field,
                         d.kind == DatasetSpec::Kind::kImageFolder ? ".root" : ".list", ": ",
                         index.status().message()));
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      spdlog::info("dataset {}: {} samples, {} classes, index {:.1f} MiB, loaded in {:.0f} ms",
                   d.kind == DatasetSpec::Kind::kImageFolder ? d.root : d.list, (*index)->size(),
                   (*index)->num_classes(), (*index)->MemoryBytes() / 1048576.0, ms);
      it = loaded.emplace(d.Key(), *std::move(index)).first;
    }
    auto pc = std::make_shared<PipelineConfig>(spec.config);
    pc->dataset = it->second;
    if (absl::Status st = ValidatePipelineConfig(*pc); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.source, ": field pipelines.", spec.config.name, ": ", st.message()));
    }
    out.push_back(std::move(pc));
  }
  return out;
}

std::string DataSocketAddress(const ListenConfig& listen) {
  if (listen.tcp.empty() || listen.data_tcp == "none") return "";
  if (!listen.data_tcp.empty()) return listen.data_tcp;
  return listen.tcp.substr(0, listen.tcp.rfind(':')) + ":0";
}

}  // namespace conveyor::server
