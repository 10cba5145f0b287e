// Costly but valid JPEGs for the decode-limit tests: files that are small on
// disk yet expensive to decode (many progressive scans over a large image,
// or a large progressive coefficient buffer). Built with libjpeg's encoder,
// so nothing large is committed. Thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <vector>

namespace conveyor::testing {

// A flat grayscale w×h progressive JPEG with 704 scans: each of the 64
// coefficients on its own, first at Al = 10 and then refined bit by bit
// down to Al = 0 (64 × 11 scans). Every scan walks
// all w×h/64 blocks, so decoding costs scans × blocks while the file stays
// a few hundred KB. libjpeg's scan-count limit is not applied here.
std::vector<uint8_t> ManyScanGrayJpeg(int w, int h);

// A w×h RGB progressive JPEG without chroma subsampling (4:4:4, libjpeg's
// simple progression), lightly textured so that it stays small: decoding
// needs a coefficient buffer of w×h×3×2 bytes.
std::vector<uint8_t> Progressive444Jpeg(int w, int h);

// Number of scans ManyScanGrayJpeg writes.
inline constexpr int kManyScanCount = 704;

}  // namespace conveyor::testing
