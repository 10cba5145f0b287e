// engine_dump: runs the in-process engine over an ImageFolder and writes every
// batch of one epoch, concatenated in order, to an .npz file (keys images,
// labels, indices, batch_sizes). The integration tests compare what the
// daemon delivers through its clients against this, byte for byte.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "tests/support/npz_writer.h"

namespace {

int Usage() {
  std::cerr << "usage: engine_dump --root DIR --out FILE.npz [--batch-size 8] [--seed 0]\n"
               "       [--epoch 0] [--rank 0] [--world-size 1] [--augment train|eval]\n"
               "       [--size 224] [--threads 2] [--layout nchw|nhwc] [--no-shuffle]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root, out, augment = "train", layout = "nchw";
  uint32_t batch = 8, rank = 0, world = 1, size = 224;
  uint64_t seed = 0, epoch = 0;
  int threads = 2;
  bool shuffle = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--root")
      root = next();
    else if (a == "--out")
      out = next();
    else if (a == "--batch-size")
      batch = std::stoul(next());
    else if (a == "--seed")
      seed = std::stoull(next());
    else if (a == "--epoch")
      epoch = std::stoull(next());
    else if (a == "--rank")
      rank = std::stoul(next());
    else if (a == "--world-size")
      world = std::stoul(next());
    else if (a == "--augment")
      augment = next();
    else if (a == "--layout")
      layout = next();
    else if (a == "--size")
      size = std::stoul(next());
    else if (a == "--threads")
      threads = std::stoi(next());
    else if (a == "--no-shuffle")
      shuffle = false;
    else
      return Usage();
  }
  if (root.empty() || out.empty()) return Usage();

  conveyor::TransformSpec spec;
  spec.mode = augment == "eval" ? conveyor::AugmentMode::kEval : conveyor::AugmentMode::kTrain;
  spec.output_height = spec.output_width = static_cast<int>(size);
  spec.layout = layout == "nhwc" ? conveyor::Layout::kNHWC : conveyor::Layout::kNCHW;
  auto made = conveyor::ImageFolderPipeline("dump", root, spec);
  if (!made.ok()) {
    std::cerr << made.status() << "\n";
    return 1;
  }
  const std::shared_ptr<const conveyor::PipelineConfig> pipeline = *made;
  conveyor::EngineOptions eo;
  eo.num_threads = threads;
  auto engine = conveyor::Engine::Create(eo);
  if (!engine.ok()) {
    std::cerr << engine.status() << "\n";
    return 1;
  }
  conveyor::StreamOptions so;
  so.batch_size = batch;
  so.seed = seed;
  so.first_epoch = epoch;
  so.num_epochs = 1;
  so.rank = rank;
  so.world_size = world;
  so.shuffle = shuffle;
  auto stream = (*engine)->OpenStream(pipeline, so);
  if (!stream.ok()) {
    std::cerr << stream.status() << "\n";
    return 1;
  }
  const conveyor::BatchLayout& l = (*stream)->layout();
  std::vector<uint8_t> images;
  std::vector<int64_t> labels, indices, sizes;
  while (true) {
    auto next = (*stream)->Next();
    if (!next.ok()) {
      std::cerr << next.status() << "\n";
      return 1;
    }
    if (!next->has_value()) break;
    const conveyor::BatchInfo& b = **next;
    const uint8_t* slot = (*stream)->arena().slot(b.slot);
    images.insert(images.end(), slot + l.images_offset,
                  slot + l.images_offset + b.num_samples * l.sample_bytes);
    const auto* lab = reinterpret_cast<const int64_t*>(slot + l.labels_offset);
    const auto* idx = reinterpret_cast<const int64_t*>(slot + l.indices_offset);
    labels.insert(labels.end(), lab, lab + b.num_samples);
    indices.insert(indices.end(), idx, idx + b.num_samples);
    sizes.push_back(b.num_samples);
    if (auto s = (*stream)->Release(b.slot); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  const int64_t h = size, w = size;
  std::vector<int64_t> shape =
      layout == "nhwc" ? std::vector<int64_t>{n, h, w, 3} : std::vector<int64_t>{n, 3, h, w};
  conveyor::testing::NpzWriter npz;
  npz.Add("images", "|u1", shape, images.data(), images.size());
  npz.Add("labels", "<i8", {n}, labels.data(), labels.size() * 8);
  npz.Add("indices", "<i8", {n}, indices.data(), indices.size() * 8);
  npz.Add("batch_sizes", "<i8", {static_cast<int64_t>(sizes.size())}, sizes.data(),
          sizes.size() * 8);
  if (auto s = npz.Write(out); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  return 0;
}
