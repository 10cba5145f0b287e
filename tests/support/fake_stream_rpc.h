// FakeStreamRpc: a StreamCall::Rpc that records what the call asks of it
// (reads, writes, Finish, deadlines, cancels) instead of talking to gRPC,
// so tests and the request fuzzer drive the call protocol
// (server/service/stream_call.h) by hand.
//
// Thread-safety: every method is safe to call concurrently (the call
// invokes it from engine threads too, with its own lock held); the driver
// completes writes by calling StreamCall::OnWriteDone itself.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "conveyor/v1/conveyor.pb.h"
#include "server/service/stream_call.h"

namespace conveyor::testing {

class FakeStreamRpc final : public server::StreamCall::Rpc {
 public:
  void StartRead() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
  }
  void StartWrite(const v1::ServerMessage* message) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_flight_) overlapping_writes_ = true;
    in_flight_ = true;
    written_.push_back(*message);
  }
  void Finish(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) finished_twice_ = true;
    if (in_flight_) finished_during_write_ = true;
    finished_ = status;
  }
  void SetWaitDeadline(std::chrono::system_clock::time_point deadline,
                       std::function<void()> expire) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++deadlines_set_;
    expire_ = std::move(expire);
  }
  void Cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++cancels_;
  }

  // The write in flight, taken off (nullopt if none).
  std::optional<v1::ServerMessage> TakeWrite() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!in_flight_) return std::nullopt;
    in_flight_ = false;
    return written_.back();
  }
  std::optional<absl::Status> finished() {
    std::lock_guard<std::mutex> lock(mu_);
    return finished_;
  }
  std::function<void()> expire() {
    std::lock_guard<std::mutex> lock(mu_);
    return expire_;
  }
  int deadlines_set() {
    std::lock_guard<std::mutex> lock(mu_);
    return deadlines_set_;
  }
  int reads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  bool misused() {
    std::lock_guard<std::mutex> lock(mu_);
    return overlapping_writes_ || finished_twice_ || finished_during_write_;
  }

 private:
  std::mutex mu_;
  int reads_ = 0;
  bool in_flight_ = false;
  std::vector<v1::ServerMessage> written_;
  std::optional<absl::Status> finished_;
  std::function<void()> expire_;
  int deadlines_set_ = 0;
  int cancels_ = 0;
  bool overlapping_writes_ = false, finished_twice_ = false, finished_during_write_ = false;
};

}  // namespace conveyor::testing
