#include "server/signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>

#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

constexpr int kExitFailure = 1;

sigset_t HandledSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  return signals;
}

}  // namespace

void BlockSignals() {
  const sigset_t signals = HandledSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

SignalWaiter::SignalWaiter(std::chrono::nanoseconds stop_budget)
    : stop_budget_(stop_budget), thread_([this] { Run(); }) {}

SignalWaiter::~SignalWaiter() {
  exiting_.store(true);
  pthread_kill(thread_.native_handle(), SIGTERM);  // taken by its sigwait
  thread_.join();
}

SignalWaiter::Request SignalWaiter::Wait() {
  MutexLock lock(&mu_);
  while (!stop_requested_ && reloads_requested_ == 0) cv_.Wait(&mu_);
  if (stop_requested_) return Request::kStop;
  reloads_requested_ = 0;
  return Request::kReload;
}

void SignalWaiter::Run() {
  const sigset_t signals = HandledSignals();
  bool seen = false;  // a stop signal came
  std::chrono::steady_clock::time_point stop_deadline;
  while (true) {
    int sig = 0;
    if (!seen) {
      if (sigwait(&signals, &sig) != 0) continue;
    } else {
      const auto left = stop_deadline - std::chrono::steady_clock::now();
      const int64_t ns =
          std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(left).count());
      const timespec wait = {static_cast<time_t>(ns / 1000000000),
                             static_cast<long>(ns % 1000000000)};
      sig = sigtimedwait(&signals, nullptr, &wait);
      if (sig < 0) {
        if (errno != EAGAIN || std::chrono::steady_clock::now() < stop_deadline) continue;
        spdlog::error(
            "shutdown not finished {:.0f} s after the signal: a worker is stuck (in I/O on a "
            "hung filesystem?); exiting now",
            std::chrono::duration<double>(stop_budget_).count());
        spdlog::default_logger()->flush();
        _exit(kExitFailure);
      }
    }
    if (exiting_.load()) return;
    if (sig == SIGHUP) {
      // Reloads run on the main thread; several signals before it gets
      // to them make one reload.
      if (seen) {
        spdlog::info("SIGHUP during shutdown: no reload");
        continue;
      }
      {
        MutexLock lock(&mu_);
        ++reloads_requested_;
      }
      cv_.Signal();
      continue;
    }
    if (seen) {
      spdlog::warn("second signal ({}) during shutdown: exiting now", strsignal(sig));
      spdlog::default_logger()->flush();
      _exit(kExitFailure);
    }
    seen = true;
    stop_deadline = std::chrono::steady_clock::now() + stop_budget_;
    spdlog::info("{}: shutting down", strsignal(sig));
    {
      MutexLock lock(&mu_);
      stop_requested_ = true;
    }
    cv_.Signal();
  }
}

}  // namespace conveyor::server
