// MediaKind: what a pipeline's samples are — the one vocabulary type that
// both the dataset layer (which files a folder lists, core/data/) and the
// decode layer (how bytes become a sample, core/decode/) speak, so neither
// includes the other. Images: one [3, H, W] (or [H, W, 3]) each. Video: a
// clip of frames, [T, 3, H, W] (or [T, H, W, 3]). Audio: a fixed length of
// samples per channel, [C, L]. SampleShape (core/decode/transform_spec.h)
// gives the shape.
//
// Thread-safety: a plain enum.
#pragma once

namespace conveyor {

enum class MediaKind { kImage, kVideo, kAudio };

}  // namespace conveyor
