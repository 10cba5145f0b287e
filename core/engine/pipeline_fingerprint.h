// PipelineFingerprint: what a pipeline's batches are a function of, part by
// part, so that clients spreading one rank's batches over several daemons
// can check that every daemon would deliver the same bytes, and name the
// part that differs when one would not.
//
// Parts (name → value):
//   "dataset"    the index's ContentDigest and sample count: its sample
//                names and labels, not its root, not the files' contents;
//   "transform"  TransformFingerprint: every parameter of the transform, as
//                `name=value;` pairs;
//   "samples"    what decides which samples fail: the error policy, its
//                rate limits, max_file_bytes;
//   "order"      whose epoch permutation the sampler uses (the global
//                shuffle, or the dataset's own, e.g. tar shards');
//   "fields"     the sample fields, `name=type,member,required|optional,
//                max_bytes;` each (empty without fields);
//   "decoders"   DecoderVersions().
// Settings that change speed only (concurrency, caches, re-laid JPEGs) are
// not parts: they never change a byte of a batch.
//
// Thread-safety: a pure function of an immutable config; the dataset digest
// is computed on the first call for a dataset and kept.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/engine/pipeline_config.h"

namespace conveyor {

std::vector<std::pair<std::string, std::string>> PipelineFingerprint(
    const PipelineConfig& pipeline);

}  // namespace conveyor
