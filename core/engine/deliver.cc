// Deliver: the consumer's side of a StreamMachine — taking ready batches,
// waiting for them, releasing slots, cancelling, the ready callback. All
// under the scheduler lock; consumers wait on the stream's own condition
// variable, so a batch wakes only its stream's consumers.
#include "absl/strings/str_format.h"
#include "core/engine/stream_machine.h"

namespace conveyor {

Stream::Poll StreamMachine::TryNext(BatchInfo* batch, absl::Status* error) {
  // Batches emitted before a data failure are still delivered; after a
  // cancel (which drops them) or an UNAVAILABLE end (shutdown, errors of the
  // system) they are not: the consumer resumes from the last batch it took.
  const bool deliverable = !terminal_ || !absl::IsUnavailable(error_);
  if (!ready_.empty() && deliverable) {
    *batch = std::move(ready_.front());
    ready_.pop_front();
    consumer_holds_[batch->slot] = 1;
    ++slots_held_;
    asked_ = false;
    ++stage(Stage::kDeliver).items_out;
    UpdateClocks(MonotonicNanos());
    CheckInvariants();
    return Stream::Poll::kBatch;
  }
  if (terminal_) {
    *error = error_;
    return Stream::Poll::kError;
  }
  if (Finished()) return Stream::Poll::kEnd;
  if (!asked_) {
    asked_ = true;  // the client waits from now until it takes a batch
    UpdateClocks(MonotonicNanos());
  }
  return Stream::Poll::kNotReady;
}

bool StreamMachine::WaitForNews(absl::Time deadline) {
  auto news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !ready_.empty() || terminal_ || Finished();
  };
  if (news()) return true;
  ++consumers_waiting_;
  const bool timed_out = ready_cv_.WaitWithDeadline(&mu_, deadline);
  --consumers_waiting_;
  return !timed_out || news();
}

absl::Status StreamMachine::Release(uint32_t slot) {
  if (slot >= consumer_holds_.size() || !consumer_holds_[slot]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slot %d is not held by this stream's consumer", slot));
  }
  consumer_holds_[slot] = 0;
  --slots_held_;
  free_slots_.push_back(slot);
  UpdateClocks(MonotonicNanos());
  CheckInvariants();
  return absl::OkStatus();
}

void StreamMachine::Cancel(absl::Status why, bool consumer_gone, Outbox* out) {
  if (consumer_gone) {
    consumer_gone_ = true;
    ready_callback_ = nullptr;
  }
  if (terminal_) {
    if (consumer_gone) DropReady();
    return;
  }
  // A stream that ended and whose batches were all taken stays ended.
  if (Finished() && ready_.empty()) return;
  // Otherwise the batches not taken are dropped (also when every batch was
  // produced: nobody will take them) and the stream stops.
  DropReady();
  Fail(std::move(why), out);
}

void StreamMachine::SetReadyCallback(std::function<void()> cb) {
  if (consumer_gone_) return;
  ready_callback_ = std::move(cb);
}

void StreamMachine::Notify(Outbox* out) {
  if (consumers_waiting_ != 0) ready_cv_.SignalAll();
  if (ready_callback_) out->callbacks.push_back(ready_callback_);
}

void StreamMachine::DropReady() {
  for (const BatchInfo& b : ready_) free_slots_.push_back(b.slot);
  ready_.clear();
}

}  // namespace conveyor
