#include "server/notifier.h"

#include <time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/ops/systemd_notify.h"
#include "server/service/service.h"

namespace conveyor::server {

namespace {
using Clock = std::chrono::steady_clock;
// The shortest pause between two rounds, whatever WatchdogSec says.
constexpr std::chrono::milliseconds kMinInterval{10};
}  // namespace

ServiceFigures FiguresOf(const ConveyorService& service) {
  const v1::GetStatsResponse stats = service.GetStats();
  ServiceFigures f;
  f.streams_open = stats.streams_open();
  for (const v1::StageStats& s : stats.stages()) {
    if (s.name() == "decode") f.images_total = s.items_out();
  }
  f.pipelines = static_cast<uint64_t>(service.ListPipelines().pipelines_size());
  return f;
}

std::string StatusText(const ServiceFigures& f, double images_per_second, const std::string& note) {
  return absl::StrFormat("%d stream%s open, %.0f images/s, %d pipeline%s%s", f.streams_open,
                         f.streams_open == 1 ? "" : "s", images_per_second, f.pipelines,
                         f.pipelines == 1 ? "" : "s", note.empty() ? "" : "; " + note);
}

ServiceNotifier::Options ServiceNotifier::DefaultOptions() {
  Options o;
  o.watchdog_timeout = SystemdWatchdogTimeout();
  return o;
}

ServiceNotifier::ServiceNotifier(std::function<ServiceFigures()> figures, Options options)
    : figures_(std::move(figures)), options_(std::move(options)) {}

ServiceNotifier::~ServiceNotifier() { StopThread(); }

std::string ServiceNotifier::Status() {
  const ServiceFigures f = figures_();  // takes the service's locks: not under ours
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  const double seconds = std::chrono::duration<double>(now - last_at_).count();
  const double rate = seconds > 0 && f.images_total >= last_images_
                          ? (f.images_total - last_images_) / seconds
                          : 0.0;
  last_images_ = f.images_total;
  last_at_ = now;
  return absl::StrCat("STATUS=", StatusText(f, rate, note_));
}

bool ServiceNotifier::Send(const std::string& message) {
  return options_.send ? options_.send(message) : NotifySystemd(message);
}

void ServiceNotifier::Ready() {
  {
    MutexLock lock(&mu_);
    last_at_ = Clock::now();
  }
  Send(absl::StrCat("READY=1\n", Status()));
  thread_ = std::thread([this] { Run(); });
}

void ServiceNotifier::Reloading() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t usec = uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
  Send(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", usec, "\nSTATUS=reloading the config"));
}

void ServiceNotifier::Reloaded(const std::string& outcome) {
  {
    MutexLock lock(&mu_);
    note_ = outcome;
  }
  Send(absl::StrCat("READY=1\n", Status()));
}

void ServiceNotifier::Stopping() {
  Send("STOPPING=1\nSTATUS=shutting down");
  StopThread();
}

void ServiceNotifier::StopThread() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void ServiceNotifier::Run() {
  std::chrono::microseconds period = options_.status_interval;
  const bool watchdog = options_.watchdog_timeout.count() > 0;
  if (watchdog) period = std::min(period, options_.watchdog_timeout / 2);
  period = std::max<std::chrono::microseconds>(period, kMinInterval);
  Clock::time_point next = Clock::now() + period;
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stop_ && Clock::now() < next) {
        cv_.WaitWithDeadline(&mu_, absl::Now() + absl::FromChrono(next - Clock::now()));
      }
      if (stop_) return;
    }
    // The ping only after the figures came back (see the header).
    std::string message = Status();
    if (watchdog) message += "\nWATCHDOG=1";
    Send(message);
    next += period;
    // After a long stall, the next round at once but no burst of rounds.
    next = std::max(next, Clock::now());
  }
}

}  // namespace conveyor::server
