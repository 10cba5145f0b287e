#include "core/base/accept_backoff.h"

#include <algorithm>

#include "core/base/posix_error.h"
#include "spdlog/spdlog.h"

namespace conveyor {

AcceptBackoff::Clock::duration AcceptBackoff::Failed(int error_number) {
  if (failures_++ == 0) {
    pause_ = kFirstPause;
    spdlog::warn("{}: cannot accept connections: {}; retrying every {} ms at most until it can",
                 name_, std::string(PosixError("accept", error_number).message()),
                 std::chrono::duration_cast<std::chrono::milliseconds>(kMaxPause).count());
  } else {
    pause_ = std::min<Clock::duration>(pause_ * 2, kMaxPause);
  }
  return pause_;
}

void AcceptBackoff::Accepted() {
  if (failures_ == 0) return;
  spdlog::info("{}: accepting connections again after {} failed attempt(s)", name_, failures_);
  failures_ = 0;
  pause_ = {};
}

}  // namespace conveyor
