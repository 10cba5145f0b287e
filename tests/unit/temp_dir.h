// TempDir: a fresh directory under $TMPDIR (or /tmp), removed with its
// contents on destruction, with helpers to fill it. For unit tests; not
// thread-safe (tests use it from the main thread).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace conveyor::testing {

class TempDir {
 public:
  TempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr ? tmp : "/tmp") + "/conveyor-test.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + templ);
    path_ = std::filesystem::canonical(templ).string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The directory, absolute and canonical.
  const std::string& path() const { return path_; }
  // path/rel.
  std::string Sub(const std::string& rel) const {
    return (std::filesystem::path(path_) / rel).string();
  }
  // Creates path/rel (and its parent folders) holding `content`; returns its path.
  std::string Write(const std::string& rel, const std::string& content = "x") const {
    const std::filesystem::path full = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full, std::ios::binary) << content;
    return full.string();
  }
  void MakeDir(const std::string& rel) const {
    std::filesystem::create_directories(std::filesystem::path(path_) / rel);
  }

 private:
  std::string path_;
};

}  // namespace conveyor::testing
