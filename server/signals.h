// conveyord's signals: SIGINT/SIGTERM ask for a shutdown, SIGHUP for a
// reload of the config file (server/reloader.h). No work is done in a
// signal handler: BlockSignals() blocks the three in the calling thread
// before any other thread exists (so every thread inherits the mask), and
// a SignalWaiter's thread alone receives them with sigwait, turning them
// into requests the main thread waits for (Wait()).
//
// Once a stop signal came, the shutdown gets `stop_budget`; a daemon still
// not gone then has a worker stuck where nothing can interrupt it (a read
// on a hung network filesystem) and exits anyway (status 1) rather than
// waiting to join it forever. A second SIGINT/SIGTERM during shutdown
// exits at once (status 1); a SIGHUP then is logged and ignored.
//
// Thread-safety: Wait() may be called from any thread (the main thread, in
// the daemon); the destructor from the thread that made the waiter.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "core/base/mutex.h"

namespace conveyor::server {

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and ignores
// SIGPIPE (peers that go away are errors, not deaths).
// REQUIRES: no other thread exists yet.
void BlockSignals();

class SignalWaiter {
 public:
  enum class Request { kStop, kReload };

  // Starts the signal thread. REQUIRES: BlockSignals() was called.
  explicit SignalWaiter(std::chrono::nanoseconds stop_budget);
  ~SignalWaiter();  // ends the signal thread
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // Waits for a request: kStop once a stop signal came (and on every call
  // after), else kReload for the SIGHUPs received since the last call
  // (several make one reload).
  Request Wait();

 private:
  void Run();

  const std::chrono::nanoseconds stop_budget_;
  Mutex mu_;
  CondVar cv_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  int reloads_requested_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> exiting_{false};  // set by the destructor: the thread ends
  std::thread thread_;
};

}  // namespace conveyor::server
