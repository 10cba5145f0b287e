#include "remote/remote_request.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace conveyor::remote {

std::string RequestKey(bool head, uint64_t offset, uint64_t length, std::string_view object) {
  return absl::StrCat(head ? "H" : "G", offset, ":", length, ":", std::string(object));
}

absl::Status Unshared(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status copy(s.code(), std::string(s.message()));
  s.ForEachPayload([&copy](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

void Store(Request* r, std::string_view chunk) {
  uint64_t at = r->offset + r->received;  // the object offset of chunk[0]
  r->received += chunk.size();
  r->progress.store(r->received, std::memory_order_relaxed);
  if (r->parts.empty()) {
    r->body.insert(r->body.end(), chunk.begin(), chunk.end());
    return;
  }
  while (!chunk.empty() && r->cursor < r->parts.size()) {
    Request& part = *r->parts[r->cursor];
    const uint64_t part_end = part.offset + part.length;
    if (at >= part_end) {
      ++r->cursor;
    } else if (at < part.offset) {
      const size_t gap = static_cast<size_t>(std::min<uint64_t>(chunk.size(), part.offset - at));
      chunk.remove_prefix(gap);
      at += gap;
    } else {
      if (part.body.capacity() < part.length) part.body.reserve(static_cast<size_t>(part.length));
      const size_t take = static_cast<size_t>(std::min<uint64_t>(chunk.size(), part_end - at));
      part.body.insert(part.body.end(), chunk.begin(),
                       chunk.begin() + static_cast<ptrdiff_t>(take));
      chunk.remove_prefix(take);
      at += take;
      part.progress.store(part.body.size(), std::memory_order_relaxed);
    }
  }
}

}  // namespace conveyor::remote
