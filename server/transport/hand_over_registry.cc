#include "server/transport/hand_over_registry.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace conveyor::server {

absl::StatusOr<HandOverRegistry::Registration> HandOverRegistry::Register(
    uint64_t stream_id, FdSource source, std::function<void()> wake) {
  if (!source) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stream %d registered for the fd hand-over without an fd source", stream_id));
  }
  Entry entry;
  if (absl::Status st = NewSecret(&entry.secret); !st.ok()) return st;
  entry.source = std::move(source);
  entry.handed_over = std::make_shared<std::atomic<bool>>(false);
  entry.wake = std::move(wake);
  Registration registration{entry.secret, entry.handed_over};
  Entry replaced;  // destroyed outside the lock
  MutexLock lock(&mu_);
  Entry& slot = entries_[stream_id];
  replaced = std::exchange(slot, std::move(entry));
  return registration;
}

bool HandOverRegistry::Contains(uint64_t stream_id) const {
  MutexLock lock(&mu_);
  return entries_.count(stream_id) != 0;
}

absl::StatusOr<UniqueFd> HandOverRegistry::HandOver(uint64_t stream_id, const Secret& secret) {
  FdSource source;
  std::function<void()> wake;
  std::shared_ptr<std::atomic<bool>> handed_over;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(stream_id);
    // Compare against something either way so that an unknown id costs the same.
    static const Secret kNone{};
    const bool known = it != entries_.end();
    const bool match = ConstantTimeEqual(known ? it->second.secret : kNone, secret);
    if (!known || !match) return absl::PermissionDeniedError("unknown stream or wrong secret");
    source = it->second.source;
    wake = it->second.wake;
    handed_over = it->second.handed_over;
  }
  // Outside the lock: a source may ask a driver.
  absl::StatusOr<UniqueFd> fd = source();
  if (!fd.ok()) return fd.status();
  handed_over->store(true, std::memory_order_release);
  if (wake) wake();
  return fd;
}

void HandOverRegistry::Unregister(uint64_t stream_id) {
  Entry gone;  // its source (and what that holds) goes outside the lock
  MutexLock lock(&mu_);
  auto it = entries_.find(stream_id);
  if (it == entries_.end()) return;
  gone = std::move(it->second);
  entries_.erase(it);
}

}  // namespace conveyor::server
