// Helpers shared by the engine's unit tests: a pipeline over a test
// ImageFolder, an engine of N threads, draining a stream, and waiting on a
// condition with a deadline (never a bare sleep). Main-thread use only
// (Catch2 assertions inside).
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "core/engine/engine.h"
#include "tests/unit/eventually.h"
#include "tests/unit/test_images.h"

namespace conveyor::testing {

inline std::shared_ptr<PipelineConfig> MakePipeline(const std::filesystem::path& root,
                                                    int size = 32) {
  auto index = DatasetIndex::LoadImageFolder(root.string());
  REQUIRE(index.ok());
  auto p = std::make_shared<PipelineConfig>();
  p->name = "test";
  p->dataset = *index;
  p->transform.output_height = p->transform.output_width = size;
  REQUIRE(ValidatePipelineConfig(*p).ok());
  return p;
}

inline std::unique_ptr<Engine> MakeEngine(int threads, EngineOptions o = EngineOptions()) {
  o.num_threads = threads;
  auto e = Engine::Create(o);
  REQUIRE(e.ok());
  return std::move(*e);
}

struct Collected {
  std::vector<BatchInfo> batches;
  std::vector<uint8_t> images;
  std::vector<int64_t> labels, indices;
  absl::Status end = absl::OkStatus();
};

// Consumes a stream to its end, releasing each batch after copying it.
inline Collected Drain(Stream& s) {
  Collected c;
  const BatchLayout& l = s.layout();
  while (true) {
    auto next = s.Next(absl::Seconds(60));
    if (!next.ok()) {
      c.end = next.status();
      return c;
    }
    if (!next->has_value()) return c;
    const BatchInfo& b = **next;
    const uint8_t* slot = s.arena().slot(b.slot);
    c.images.insert(c.images.end(), slot, slot + b.num_samples * l.sample_bytes);
    const auto* lab = reinterpret_cast<const int64_t*>(slot + l.labels_offset);
    const auto* idx = reinterpret_cast<const int64_t*>(slot + l.indices_offset);
    c.labels.insert(c.labels.end(), lab, lab + b.num_samples);
    c.indices.insert(c.indices.end(), idx, idx + b.num_samples);
    c.batches.push_back(b);
    if (!s.Release(b.slot).ok()) {
      c.end = absl::InternalError("release failed");
      return c;
    }
  }
}

inline Collected RunOnce(const std::shared_ptr<const PipelineConfig>& p, int threads,
                         StreamOptions so, EngineOptions eo = EngineOptions()) {
  auto engine = MakeEngine(threads, eo);
  auto stream = engine->OpenStream(p, so);
  REQUIRE(stream.ok());
  return Drain(**stream);
}

// Polls `cond` until it holds or `timeout` passes; returns its last value.
// For states only observable by polling (stats); a wrong behaviour fails at
// the deadline, a right one returns as soon as it holds.
inline bool WaitFor(const std::function<bool()>& cond,
                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  return Eventually(cond, timeout);
}

// Open file descriptors of this process whose link target contains `needle`
// (a memfd shows as "/memfd:NAME (deleted)").
inline int OpenFdsMatching(const std::string& needle) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().find(needle) != std::string::npos) ++n;
  }
  return n;
}

}  // namespace conveyor::testing
