#include "core/decode/sample_geometry.h"

#include <algorithm>
#include <cmath>

namespace conveyor {

int PaddedIndex(int i, int size, PadMode mode) {
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : size - 1;
    case PadMode::kReflect:
      // Mirrored about the edge pixels (torch's reflect); padding < size.
      return std::clamp(i < 0 ? -i : 2 * (size - 1) - i, 0, size - 1);
  }
  return -1;
}

void TransformBoxes(const SampleGeometry& g, BoxFormat format, bool normalized,
                    std::span<const double> boxes, size_t columns, std::vector<float>* out) {
  out->clear();
  const double out_w = g.output_width, out_h = g.output_height;
  if (columns < 4) return;
  for (size_t b = 0; b + columns <= boxes.size(); b += columns) {
    double x0 = boxes[b], y0 = boxes[b + 1], x1 = boxes[b + 2], y1 = boxes[b + 3];
    if (format == BoxFormat::kXywh) {
      x1 += x0;
      y1 += y0;
    }
    if (normalized) {
      x0 *= g.source_width;
      x1 *= g.source_width;
      y0 *= g.source_height;
      y1 *= g.source_height;
    }
    if (!(std::isfinite(x0) && std::isfinite(y0) && std::isfinite(x1) && std::isfinite(y1))) {
      continue;
    }
    // Clipped to the resized image, moved by the padding's shift, clipped to the output.
    auto map_x = [&](double x) {
      return std::clamp(std::clamp(x * g.scale_x - g.offset_x, 0.0, out_w) + g.shift_x, 0.0, out_w);
    };
    auto map_y = [&](double y) {
      return std::clamp(std::clamp(y * g.scale_y - g.offset_y, 0.0, out_h) + g.shift_y, 0.0, out_h);
    };
    double a = map_x(std::min(x0, x1)), c = map_x(std::max(x0, x1));
    double top = map_y(std::min(y0, y1)), bottom = map_y(std::max(y0, y1));
    if (!(c > a) || !(bottom > top)) continue;  // nothing of it inside
    if (g.flip) {
      const double fa = out_w - c, fc = out_w - a;
      a = fa;
      c = fc;
    }
    if (g.vflip) {
      const double ft = out_h - bottom, fb = out_h - top;
      top = ft;
      bottom = fb;
    }
    double v[4] = {a, top, c, bottom};
    if (format == BoxFormat::kXywh) {
      v[2] = c - a;
      v[3] = bottom - top;
    }
    if (normalized) {
      v[0] /= out_w;
      v[2] /= out_w;
      v[1] /= out_h;
      v[3] /= out_h;
    }
    for (double x : v) out->push_back(static_cast<float>(x));
    for (size_t k = 4; k < columns; ++k) out->push_back(static_cast<float>(boxes[b + k]));
  }
}

void TransformKeypoints(const SampleGeometry& g, bool normalized, std::span<const double> points,
                        size_t columns, std::vector<float>* out) {
  out->clear();
  if (columns < 2) return;
  const double out_w = g.output_width, out_h = g.output_height;
  for (size_t p = 0; p + columns <= points.size(); p += columns) {
    double x = points[p], y = points[p + 1];
    if (normalized) {
      x *= g.source_width;
      y *= g.source_height;
    }
    const double rx = x * g.scale_x - g.offset_x, ry = y * g.scale_y - g.offset_y;
    double ox = rx + g.shift_x, oy = ry + g.shift_y;
    // Inside the resized image and inside the output (NaN is neither).
    const bool inside = rx >= 0 && rx <= out_w && ry >= 0 && ry <= out_h && ox >= 0 &&
                        ox <= out_w && oy >= 0 && oy <= out_h;
    if (g.flip) ox = out_w - ox;
    if (g.vflip) oy = out_h - oy;
    if (normalized) {
      ox /= out_w;
      oy /= out_h;
    }
    out->push_back(static_cast<float>(ox));
    out->push_back(static_cast<float>(oy));
    for (size_t k = 2; k < columns; ++k) {
      out->push_back(k == 2 && !inside ? 0.0f : static_cast<float>(points[p + k]));
    }
  }
}

}  // namespace conveyor
