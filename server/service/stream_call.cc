#include "server/service/stream_call.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "core/base/text_escape.h"
#include "server/service/batch_message.h"
#include "server/transport/transport.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

// How threads other than the RPC's reach the call. Wakers register as
// callers under `mu` and pump outside it, so that concurrent wakers never
// queue behind a pump in progress (Pump's TryLock hands the work to it);
// Detach clears `call` and waits for the callers to leave.
struct StreamCall::Gate {
  Mutex mu;
  CondVar idle;  // signalled when callers drops to 0
  StreamCall* call ABSL_GUARDED_BY(mu) = nullptr;
  int callers ABSL_GUARDED_BY(mu) = 0;

  // Runs `fn` on the call unless Detach has begun.
  template <typename Fn>
  void With(Fn fn) {
    StreamCall* c = nullptr;
    {
      MutexLock lock(&mu);
      if (call == nullptr) return;
      c = call;
      ++callers;
    }
    fn(c);
    bool last = false;
    {
      MutexLock lock(&mu);
      last = --callers == 0;
    }
    if (last) idle.SignalAll();
  }
};

StreamCall::StreamCall(ConveyorService* service, ClientIdentity client, Rpc* rpc)
    : service_(service), client_(std::move(client)), rpc_(rpc), gate_(std::make_shared<Gate>()) {
  MutexLock lock(&gate_->mu);
  gate_->call = this;
}

StreamCall::~StreamCall() = default;

void StreamCall::Start() {
  MutexLock lock(&mu_);
  if (service_->shutting_down()) {
    service_->CountRefusedStream(absl::StatusCode::kUnavailable);
    EndLocked(absl::UnavailableError("daemon shutting down"));
    PumpLocked();
    return;
  }
  rpc_->StartRead();
}

void StreamCall::OnRead(const v1::ClientMessage* message) {
  if (message == nullptr) {
    // The client half-closed (or the call is being cancelled). Batches keep
    // flowing while there are credits; no more reads.
    MutexLock lock(&mu_);
    if (stream_ == nullptr) {
      EndLocked(
          absl::InvalidArgumentError("the client closed the stream before sending OpenStream"));
    }
  } else {
    switch (message->kind_case()) {
      case v1::ClientMessage::kOpen: HandleOpen(message->open()); break;
      case v1::ClientMessage::kRelease: HandleRelease(message->release()); break;
      default: {
        MutexLock lock(&mu_);
        EndLocked(absl::InvalidArgumentError("empty ClientMessage (set open or release)"));
        break;
      }
    }
  }
  Pump();
}

void StreamCall::OnUnparseable() {
  Stream* to_cancel = nullptr;
  {
    MutexLock lock(&mu_);
    EndLocked(absl::InvalidArgumentError(
        "the client's message does not parse as a conveyor.v1.ClientMessage (a message "
        "compressed in an encoding unknown to gRPC arrives like this; the daemon accepts "
        "identity only)"));
    to_cancel = stream_;
  }
  if (to_cancel != nullptr) to_cancel->Cancel(absl::InvalidArgumentError("unparseable message"));
  Pump();
}

void StreamCall::OnWriteDone(bool ok) {
  Stream* to_cancel = nullptr;
  {
    MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      EndLocked(absl::CancelledError("write failed: client went away"));
      to_cancel = stream_;
    }
  }
  if (to_cancel != nullptr) to_cancel->Cancel(absl::CancelledError("client went away"));
  Pump();
}

void StreamCall::OnCancel() {
  Stream* to_cancel = nullptr;
  {
    MutexLock lock(&mu_);
    EndLocked(absl::CancelledError("call cancelled"));
    to_cancel = stream_;
  }
  // Frees the stream's work at once; its slots go with the session in Detach.
  if (to_cancel != nullptr) to_cancel->Cancel(absl::CancelledError("client went away"));
  Pump();
}

void StreamCall::Detach() {
  {
    // After this no other thread can reach the call: a wake either finished
    // already or will find the gate empty.
    MutexLock lock(&gate_->mu);
    gate_->call = nullptr;
    while (gate_->callers > 0) gate_->idle.Wait(&gate_->mu);
  }
  std::unique_ptr<Session> session;
  absl::Status end;
  uint64_t batches = 0, samples = 0, failed = 0;
  {
    MutexLock lock(&mu_);
    session = std::move(session_);
    stream_ = nullptr;
    end = end_.value_or(absl::OkStatus());
    batches = total_batches_;
    samples = total_samples_;
    failed = total_failed_;
  }
  if (session == nullptr) return;
  session->stream().SetReadyCallback(nullptr);
  session->transport().Finish(end);
  if (end.ok()) {
    spdlog::info("stream {} of {} done: {} batches, {} samples, {} failed", session->id(),
                 client_.Describe(), batches, samples, failed);
  } else {
    spdlog::info("stream {} of {} ended ({}: {}) after {} batches, {} samples", session->id(),
                 client_.Describe(), static_cast<int>(end.code()), EscapeText(end.message()),
                 batches, samples);
  }
  session.reset();  // cancels the core stream, frees its budget and transport
}

// The stream's ready callback and the transport's and service's wakes (an
// engine worker, the fd socket's thread, the thread in Stream::Release or
// Cancel or in BeginShutdown; no engine lock held).
void StreamCall::Wake(const std::shared_ptr<Gate>& gate) {
  gate->With([](StreamCall* c) { c->Pump(); });
}

// The wait's deadline passed (the RPC's alarm thread).
void StreamCall::Expire(const std::shared_ptr<Gate>& gate) {
  gate->With([](StreamCall* c) {
    c->wait_expired_.store(true, std::memory_order_release);
    c->Pump();
  });
}

// The idle watchdog's thread; no lock held (Rpc::Cancel may run the RPC's
// reactions inline).
void StreamCall::Abort(const std::shared_ptr<Gate>& gate) {
  gate->With([](StreamCall* c) { c->rpc_->Cancel(); });
}

// Moves the stream on without waiting: if another thread holds mu_, it will
// see pump_wanted_ after it lets go and pump for us.
void StreamCall::Pump() {
  pump_wanted_.store(true, std::memory_order_release);
  while (pump_wanted_.load(std::memory_order_acquire)) {
    if (!mu_.TryLock()) return;
    pump_wanted_.store(false, std::memory_order_relaxed);
    PumpLocked();
    mu_.Unlock();
  }
}

void StreamCall::PumpLocked() {
  while (!finished_ && !write_in_flight_) {
    if (!queue_.empty()) {
      writing_ = std::move(queue_.front());
      queue_.pop_front();
      write_in_flight_ = true;
      rpc_->StartWrite(&writing_);
      return;
    }
    if (end_.has_value()) {
      // The stream ended by itself: its client may still need the call (and
      // with it the session) to read what it was sent.
      if (ended_by_stream_ && session_->transport().MustWaitForClient(*end_) &&
          !service_->shutting_down()) {
        if (!wait_deadline_set_) {
          // A client that never comes is not waited for forever: it cannot
          // have wanted the batches.
          wait_deadline_set_ = true;
          rpc_->SetWaitDeadline(
              std::chrono::system_clock::now() + service_->options().handover_grace,
              [gate = gate_] { Expire(gate); });
        }
        if (!wait_expired_.load(std::memory_order_acquire)) {
          return;  // woken by the transport, by shutdown or by the deadline
        }
      }
      finished_ = true;
      rpc_->Finish(*end_);
      return;
    }
    if (stream_ == nullptr) return;
    BatchInfo batch;
    absl::Status error;
    switch (stream_->TryNext(&batch, &error)) {
      case Stream::Poll::kNotReady: return;
      case Stream::Poll::kBatch: AddBatchLocked(batch); break;
      case Stream::Poll::kEnd: {
        v1::ServerMessage m;
        v1::StreamEnd* e = m.mutable_end();
        e->set_batches(total_batches_);
        e->set_samples(total_samples_);
        e->set_samples_failed(total_failed_);
        queue_.push_back(std::move(m));
        end_ = absl::OkStatus();
        ended_by_stream_ = true;
        break;
      }
      case Stream::Poll::kError:
        // The batches before a data error are delivered and readable.
        end_ = error;
        ended_by_stream_ = true;
        break;
    }
  }
}

// Records why the call ends (the first reason wins). An error drops the
// messages not yet written.
void StreamCall::EndLocked(absl::Status status) {
  // Client gone, bad request, shutdown: no one to wait for.
  ended_by_stream_ = false;
  if (end_.has_value()) return;
  if (!status.ok()) queue_.clear();
  end_ = std::move(status);
}

void StreamCall::HandleOpen(const v1::OpenStream& open) {
  {
    MutexLock lock(&mu_);
    if (stream_ != nullptr) {
      EndLocked(absl::InvalidArgumentError("OpenStream sent twice"));
      return;
    }
    if (end_.has_value()) return;  // cancelled meanwhile
  }
  absl::StatusOr<std::unique_ptr<Session>> session = service_->OpenStream(
      open, client_, [gate = gate_] { Wake(gate); }, [gate = gate_] { Abort(gate); });
  if (!session.ok()) {
    // The pipeline name is the client's: escaped and capped in log lines.
    spdlog::info("stream request from {} for pipeline '{}' refused: {}", client_.Describe(),
                 EscapeText(open.pipeline(), kClientStringCap),
                 EscapeText(absl::StatusCodeToString(session.status().code()) + ": " +
                            std::string(session.status().message())));
    service_->CountRefusedStream(session.status().code());
    MutexLock lock(&mu_);
    EndLocked(session.status());
    return;
  }
  const StreamOptions& o = (*session)->stream().options();
  spdlog::info(
      "stream {} opened by {}: pipeline {}, batch_size {}, credits {}, {}, rank {}/{}, epochs "
      "{}+{}, epoch offset {}",
      (*session)->id(), client_.Describe(), EscapeText(open.pipeline(), kClientStringCap),
      o.batch_size, o.num_slots, TransportName((*session)->transport_kind()), o.rank, o.world_size,
      o.first_epoch, o.num_epochs, o.epoch_offset);
  Stream* stream = &(*session)->stream();
  stream->SetReadyCallback([gate = gate_] { Wake(gate); });
  MutexLock lock(&mu_);
  v1::ServerMessage m;
  *m.mutable_opened() = (*session)->opened();
  queue_.push_back(std::move(m));
  session_ = *std::move(session);
  stream_ = stream;
  credits_ = o.num_slots;
  waiting_since_ = Clock::now();  // every credit is free: the client waits for its first batch
  if (end_.has_value()) return;   // cancelled while opening: Detach cleans up
  rpc_->StartRead();
}

void StreamCall::HandleRelease(const v1::Release& release) {
  Stream* stream = nullptr;
  absl::Status bad;
  {
    MutexLock lock(&mu_);
    if (stream_ == nullptr) {
      EndLocked(absl::InvalidArgumentError("Release before OpenStream"));
      return;
    }
    stream = stream_;
    bad = CheckReleaseLocked(release);
    if (!bad.ok()) EndLocked(bad);
    // A client that held every credit has a free one again: it waits from now.
    if (bad.ok() && !waiting_since_.has_value() && held_.size() < credits_) {
      waiting_since_ = Clock::now();
    }
  }
  if (!bad.ok()) {
    stream->Cancel(bad);
    return;
  }
  for (uint32_t slot : release.slots()) {
    if (absl::Status st = stream->Release(slot); !st.ok()) {
      {
        MutexLock lock(&mu_);
        EndLocked(st);
      }
      stream->Cancel(st);
      return;
    }
  }
  MutexLock lock(&mu_);
  if (!end_.has_value()) rpc_->StartRead();
}

absl::Status StreamCall::CheckReleaseLocked(const v1::Release& release) {
  if (release.sequences_size() != 0 && release.sequences_size() != release.slots_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Release names %d slot(s) but %d batch sequence(s): give one per slot, "
                        "or none",
                        release.slots_size(), release.sequences_size()));
  }
  for (int i = 0; i < release.slots_size(); ++i) {
    const uint32_t slot = release.slots(i);
    const auto it = held_.find(slot);
    if (release.sequences_size() != 0) {
      const uint64_t sequence = release.sequences(i);
      if (it == held_.end()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Release of slot %d for batch %d: the client holds no batch in that slot (released "
            "already, or never delivered)",
            slot, sequence));
      }
      if (it->second != sequence) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Release of slot %d for batch %d: that slot holds batch %d now (a stale or repeated "
            "Release)",
            slot, sequence, it->second));
      }
    }
    if (it != held_.end()) held_.erase(it);
  }
  return absl::OkStatus();
}

void StreamCall::AddBatchLocked(const BatchInfo& b) {
  v1::ServerMessage m;
  FillBatchHeader(b, *stream_, m.mutable_batch());
  session_->transport().Deliver(b, m.mutable_batch());
  session_->CountDelivered(b.num_samples, m.batch().images_bytes());
  queue_.push_back(std::move(m));
  held_[b.slot] = b.sequence;
  // The client's wait for this batch ends; if it still has a free credit,
  // its wait for the next one begins.
  const Clock::time_point now = Clock::now();
  if (waiting_since_.has_value()) {
    session_->CountDataWait(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - *waiting_since_).count()));
    waiting_since_.reset();
  }
  if (held_.size() < credits_) waiting_since_ = now;

  ++total_batches_;
  total_samples_ += b.num_samples;
  total_failed_ += b.failures.size();
  ++epoch_batches_;
  epoch_samples_ += b.num_samples;
  if (b.end_of_epoch) {
    v1::ServerMessage e;
    e.mutable_epoch_end()->set_epoch(b.epoch);
    e.mutable_epoch_end()->set_batches(epoch_batches_);
    e.mutable_epoch_end()->set_samples(epoch_samples_);
    queue_.push_back(std::move(e));
    epoch_batches_ = 0;
    epoch_samples_ = 0;
  }
}

}  // namespace conveyor::server
