#include "core/engine/output_cache.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace conveyor {

namespace {

// The whole-image ops, only when any is on: pipelines without them keep the
// fingerprints (and cache keys) they always had.
std::string ImageOpsFingerprint(const ImageOpsSpec& o) {
  if (!o.any()) return "";
  return absl::StrFormat(
      ";pad=%d,%d,%d;jitter=%a,%a,%a,%a,%a,%a,%a,%a,%a;blur=%a,%d,%d,%a,%a;trivial=%d", o.padding,
      static_cast<int>(o.padding_mode), o.fill, o.jitter_probability, o.brightness_min,
      o.brightness_max, o.contrast_min, o.contrast_max, o.saturation_min, o.saturation_max,
      o.hue_min, o.hue_max, o.blur_probability, o.blur_kernel_width, o.blur_kernel_height,
      o.blur_sigma_min, o.blur_sigma_max, o.trivial_augment_bins);
}

}  // namespace

std::string TransformFingerprint(const TransformSpec& t) {
  // %a writes a float or double exactly (hexadecimal mantissa and exponent).
  // Bump the version when the decoders' output changes for the same spec.
  const VideoSpec& v = t.video;
  const AudioSpec& a = t.audio;
  return absl::StrFormat(
             "v1;kind=%d;mode=%d;out=%dx%d;layout=%d;dtype=%d;mean=%a,%a,%a;std=%a,%a,%a;"
             "scale=%a,%a;ratio=%a,%a;flip=%a;resize=%d;dct=%d;max_pixels=%d;max_decode_memory=%d;"
             "max_decode_seconds=%a;video=%d,%d,%a,%d,%d,%a,%d;audio=%d,%d,%d,%d,%d,%d,%a;vflip=%a;"
             "gray=%a",
             static_cast<int>(t.kind), static_cast<int>(t.mode), t.output_height, t.output_width,
             static_cast<int>(t.layout), static_cast<int>(t.dtype), t.mean[0], t.mean[1], t.mean[2],
             t.std[0], t.std[1], t.std[2], t.scale_min, t.scale_max, t.ratio_min, t.ratio_max,
             t.flip_probability, t.resize_size, t.dct_scaling ? 1 : 0, t.max_pixels,
             t.max_decode_memory, t.max_decode_seconds, v.clip_frames, v.frame_stride, v.fps,
             static_cast<int>(v.clip_start), v.max_frames_decoded, v.max_duration_seconds,
             v.autorotate ? 1 : 0, a.sample_rate, a.channels, a.clip_samples,
             static_cast<int>(a.crop), static_cast<int>(a.padding), a.max_samples,
             a.max_duration_seconds, t.vflip_probability, t.grayscale_probability) +
         ImageOpsFingerprint(t.image_ops);
}

OutputCache::Bytes OutputCache::Lookup(std::string_view key) {
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.value;
    }
    if (store_ == nullptr) {
      ++stats_.misses;
      return nullptr;
    }
  }
  // The store reads disk: not under the lock.
  std::vector<uint8_t> bytes;
  if (!store_->Get(key, &bytes)) {
    MutexLock lock(&mu_);
    ++stats_.misses;
    return nullptr;
  }
  Bytes value = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  {
    MutexLock lock(&mu_);
    ++stats_.hits;
    ++stats_.store_hits;
  }
  Keep(std::string(key), value);
  return value;
}

void OutputCache::Insert(std::string key, Bytes value) {
  if (store_ != nullptr) store_->Put(key, *value);  // disk: not under the lock
  Keep(std::move(key), std::move(value));
}

void OutputCache::Keep(std::string key, Bytes value) {
  const uint64_t cost = EntryBytes(key.size(), value->size());
  std::vector<Bytes> evicted;  // freed after the lock is released
  std::string spare;           // a duplicate's key, freed likewise
  {
    MutexLock lock(&mu_);
    if (cost > capacity_bytes_) {
      ++stats_.refused;
      return;
    }
    if (entries_.count(key) != 0) {
      spare = std::move(key);
    } else {
      while (stats_.bytes + cost > capacity_bytes_ && !lru_.empty()) {
        auto victim = entries_.find(lru_.back());
        stats_.bytes -= victim->second.cost;
        evicted.push_back(std::move(victim->second.value));
        entries_.erase(victim);
        lru_.pop_back();
        ++stats_.evictions;
      }
      lru_.push_front(std::move(key));
      entries_.emplace(std::string_view(lru_.front()), Entry{std::move(value), lru_.begin(), cost});
      stats_.bytes += cost;
      ++stats_.inserts;
    }
    stats_.entries = entries_.size();
  }
}

OutputCache::Stats OutputCache::GetStats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.capacity_bytes = capacity_bytes_;
  return s;
}

}  // namespace conveyor
