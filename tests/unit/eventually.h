// Eventually: waits for a condition that tests can only observe by polling
// (stats, /proc, another process's side of a socket). A wrong behaviour fails
// at the deadline; a right one returns as soon as the condition holds, so the
// deadline is generous and costs nothing when the code is right.
//
// Thread-safety: `pred` is called from the calling thread only.
#pragma once

#include <chrono>
#include <thread>

namespace conveyor::testing {

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the poll interval
  }
  return true;
}

}  // namespace conveyor::testing
