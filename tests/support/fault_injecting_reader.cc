#include "tests/support/fault_injecting_reader.h"

#include <algorithm>
#include <cerrno>

#include "absl/time/clock.h"

namespace conveyor::testing {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ReadFault Errno(int error_number) {
  ReadFault f;
  f.error_number = error_number;
  return f;
}

void FaultInjectingReader::Plan(const std::string& suffix, ReadFault fault, int times) {
  std::lock_guard<std::mutex> l(mu_);
  plans_.push_back(Entry{suffix, fault, times});
}

void FaultInjectingReader::PlanAll(ReadFault fault) {
  std::lock_guard<std::mutex> l(mu_);
  all_ = fault;
}

int FaultInjectingReader::reads_of(const std::string& suffix) const {
  std::lock_guard<std::mutex> l(mu_);
  int n = 0;
  for (const auto& [path, count] : reads_) {
    if (EndsWith(path, suffix)) n += count;
  }
  return n;
}

int FaultInjectingReader::injected() const {
  std::lock_guard<std::mutex> l(mu_);
  return injected_;
}

void FaultInjectingReader::BeginRead(int fd, std::string_view shown) const {
  base_.BeginRead(fd, shown);
  ReadFault fault;
  {
    std::lock_guard<std::mutex> l(mu_);
    ++reads_[std::string(shown)];
    fault = all_;
    for (Entry& e : plans_) {
      if (!EndsWith(shown, e.suffix)) continue;
      if (e.times == 0) break;
      if (e.times > 0) --e.times;
      ++injected_;
      fault = e.fault;
      break;
    }
    open_[fd] = fault;
  }
  if (fault.delay > absl::ZeroDuration()) absl::SleepFor(fault.delay);
}

ssize_t FaultInjectingReader::Pread(int fd, void* buf, size_t count, off_t offset) const {
  ReadFault fault;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = open_.find(fd);
    if (it != open_.end()) {
      fault = it->second;
      it->second.error_number = 0;  // only the first pread of the read fails
    }
  }
  if (fault.error_number != 0) {
    errno = fault.error_number;
    return -1;
  }
  if (fault.max_bytes_per_call != 0) {
    count = static_cast<size_t>(std::min<uint64_t>(count, fault.max_bytes_per_call));
  }
  if (fault.end_after_bytes >= 0) {
    const int64_t left = fault.end_after_bytes - static_cast<int64_t>(offset);
    if (left <= 0) return 0;
    count = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(count), left));
  }
  return base_.Pread(fd, buf, count, offset);
}

void FaultInjectingReader::EndRead(int fd) const {
  {
    std::lock_guard<std::mutex> l(mu_);
    open_.erase(fd);
  }
  base_.EndRead(fd);
}

}  // namespace conveyor::testing
