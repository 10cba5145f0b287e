// AvDisplayOrientation: a video stream's rotation metadata (its display
// matrix) read the way the ffmpeg CLI reads it for autorotation, and the
// lossless transform that turns a stored frame into the displayed one.
//
// The rule is FFmpeg 5.1's fftools rule: theta = the matrix's clockwise
// angle rounded to whole degrees in [0, 360); 90 -> transpose=clock (or
// cclock_flip when the matrix mirrors), 180 -> hflip and/or vflip as the
// matrix's diagonal says, 270 -> transpose=cclock (or clock_flip), about 0
// -> vflip when the matrix flips rows. Another angle (ffmpeg would rotate by
// it with its rotate filter, filling corners) is not applied: `odd_angle` is
// set and the frame stays as stored.
//
// OrientFrame moves whole pixels plane by plane like FFmpeg's transpose,
// hflip and vflip filters, so the result is byte-identical to theirs. A
// quarter turn needs a pixel format with the same chroma subsampling both
// ways (FFmpeg's transpose refuses the others and converts first, which is
// not reproduced here): yuv422p and similar are an error of the sample.
//
// Thread-safety: plain functions; OrientFrame writes only `out`.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/decode/ffmpeg/handles.h"

namespace conveyor {

// Displayed pixel (row r, column c) comes from stored pixel (R, C) where
// (a, b) = swap ? (c, r) : (r, c), R = reverse_rows ? H - 1 - a : a and
// C = reverse_columns ? W - 1 - b : b (W x H the stored size).
struct DisplayOrientation {
  bool swap = false;  // a quarter turn: the displayed frame is H x W
  bool reverse_rows = false;
  bool reverse_columns = false;
  int degrees = 0;         // ffmpeg's theta (clockwise), for messages and traces
  bool odd_angle = false;  // not a multiple of 90: left as stored

  bool identity() const { return !swap && !reverse_rows && !reverse_columns; }
};

// From a display matrix (9 int32, AV_PKT_DATA_DISPLAYMATRIX); null: none.
DisplayOrientation OrientationFromDisplayMatrix(const int32_t* matrix);

// The stream's orientation (its display-matrix side data; none: identity).
DisplayOrientation StreamOrientation(const AVStream* stream);

// Writes `in` transformed by `o` into `out` (format, size and colour
// properties set; its buffer reused when the format and size match and it
// is writable, else reallocated). InvalidArgument for a pixel format the
// transform cannot move (paletted, bit-packed, hardware, or asymmetric
// chroma subsampling under a quarter turn).
absl::Status OrientFrame(const AVFrame* in, const DisplayOrientation& o, AVFrame* out);

}  // namespace conveyor
