// Front- and rear-coding of the dataset index's paths. See front_coded_paths.h.
//
// Block layout: the first string as varint(length) + bytes; each next string
// as varint(prefix) + varint(suffix) + varint(middle length) + middle bytes,
// where the string is previous[0, prefix) + middle + the last `suffix` bytes
// of previous, and prefix + suffix <= both lengths. Varints are LEB128.
#include "core/data/front_coded_paths.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace conveyor {
namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Reads a varint at *p (the data was written by PutVarint) and advances *p.
uint64_t GetVarint(const char** p) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(**p);
    ++*p;
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return v;
  }
}

}  // namespace

void FrontCodedPaths::Builder::Add(std::string_view s) {
  if (count_ % kBlockSize == 0) {
    block_starts_.push_back(data_.size());
    PutVarint(&data_, s.size());
    data_.append(s);
  } else {
    const size_t limit = std::min(previous_.size(), s.size());
    size_t prefix = 0;
    while (prefix < limit && previous_[prefix] == s[prefix]) ++prefix;
    size_t suffix = 0;
    while (prefix + suffix < limit &&
           previous_[previous_.size() - 1 - suffix] == s[s.size() - 1 - suffix]) {
      ++suffix;
    }
    const size_t middle = s.size() - prefix - suffix;
    PutVarint(&data_, prefix);
    PutVarint(&data_, suffix);
    PutVarint(&data_, middle);
    data_.append(s.substr(prefix, middle));
  }
  previous_.assign(s);
  ++count_;
}

FrontCodedPaths FrontCodedPaths::Builder::Finish() {
  FrontCodedPaths out;
  data_.shrink_to_fit();
  block_starts_.shrink_to_fit();
  out.data_ = std::move(data_);
  out.block_starts_ = std::move(block_starts_);
  out.count_ = count_;
  *this = Builder();
  return out;
}

void FrontCodedPaths::Get(size_t i, std::string* out) const {
  const char* p = data_.data() + block_starts_[i / kBlockSize];
  const uint64_t first = GetVarint(&p);
  out->assign(p, first);
  p += first;
  for (size_t k = i % kBlockSize; k > 0; --k) {
    const size_t prefix = GetVarint(&p);
    const size_t suffix = GetVarint(&p);
    const size_t middle = GetVarint(&p);
    const size_t old_size = out->size();
    const size_t new_size = prefix + middle + suffix;
    if (new_size > old_size) out->resize(new_size);
    char* d = out->data();
    // The shared tail moves first (it may overlap its new place), then the
    // middle fills the gap; the shared head stays where it is.
    std::memmove(d + prefix + middle, d + old_size - suffix, suffix);
    std::memcpy(d + prefix, p, middle);
    p += middle;
    out->resize(new_size);
  }
}

std::string FrontCodedPaths::Get(size_t i) const {
  std::string out;
  Get(i, &out);
  return out;
}

size_t FrontCodedPaths::MemoryBytes() const {
  return sizeof(*this) + data_.capacity() + block_starts_.capacity() * sizeof(uint64_t);
}

}  // namespace conveyor
