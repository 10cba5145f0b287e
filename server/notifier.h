// ServiceNotifier: keeps systemd's service manager told how conveyord is
// doing (Type=notify units; server/ops/systemd_notify.h does the sending):
//   Ready()      READY=1 — call once the daemon answers health checks
//                SERVING, i.e. it listens with every dataset loaded — and
//                from then on, from a thread of its own, every
//                status_interval a STATUS= line ("2 streams open, 1234
//                images/s, 3 pipelines") and, when systemd asks for a
//                watchdog (WatchdogSec=), WATCHDOG=1 at half its timeout;
//   Reloading()  RELOADING=1 (a SIGHUP reload began);
//   Reloaded()   READY=1 again, the reload's outcome kept in the STATUS line;
//   Stopping()   STOPPING=1 and the thread ends (no more pings).
// The watchdog ping is a liveness check, not a timer: each one follows a
// fresh reading of the figures, which takes the service's and the engine's
// locks, so a daemon deadlocked there stops pinging and systemd restarts it.
//
// Thread-safety: the methods may be called from any thread, but Ready,
// Reloading, Reloaded and Stopping are meant for the daemon's main thread
// (in that order; Stopping at most once, Ready once before it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "core/base/mutex.h"

namespace conveyor::server {

class ConveyorService;

// What the STATUS line shows.
struct ServiceFigures {
  uint64_t streams_open = 0;
  uint64_t images_total = 0;  // decoded since start, over all streams
  uint64_t pipelines = 0;
};

// The figures of `service` now (GetStats and ListPipelines).
ServiceFigures FiguresOf(const ConveyorService& service);

// "2 streams open, 1234 images/s, 3 pipelines", plus "; NOTE" when `note`
// is not empty.
std::string StatusText(const ServiceFigures& figures, double images_per_second,
                       const std::string& note);

class ServiceNotifier {
 public:
  struct Options {
    std::chrono::milliseconds status_interval{2000};
    // Zero: no watchdog pings. Default: what systemd asked for.
    std::chrono::microseconds watchdog_timeout{0};
    // Sends one message; default NotifySystemd.
    std::function<bool(const std::string&)> send;
  };
  static Options DefaultOptions();  // from the environment (SystemdWatchdogTimeout)

  // `figures` is called on the notifier's thread; it must be safe to call
  // from there until Stopping() returns or this object is destroyed.
  ServiceNotifier(std::function<ServiceFigures()> figures, Options options);
  ~ServiceNotifier();  // ends the thread (without STOPPING=1)
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  void Ready();
  void Reloading();
  void Reloaded(const std::string& outcome);
  void Stopping();

 private:
  void Run();
  void StopThread();
  // "STATUS=…" from a fresh reading of the figures (outside mu_).
  std::string Status();
  bool Send(const std::string& message);

  const std::function<ServiceFigures()> figures_;
  const Options options_;
  std::thread thread_;  // started by Ready, joined by StopThread

  Mutex mu_;
  CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::string note_ ABSL_GUARDED_BY(mu_);  // the last reload's outcome
  // The previous reading, for images/s.
  uint64_t last_images_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
