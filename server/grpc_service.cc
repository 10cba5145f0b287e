#include "server/grpc_service.h"

#include <grpcpp/alarm.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "server/batch_message.h"
#include "server/transport.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

namespace {

// One StreamBatches call. Reading: one read is always outstanding until the
// stream ends; OpenStream opens the core stream, Release returns slots.
// Writing: messages go out one at a time from queue_ (StreamOpened, Batch,
// EpochEnd, StreamEnd); when the queue is empty the reactor polls the core
// stream (TryNext). Polling happens in Pump(), from two places: the stream's
// ready callback (an engine worker, after a batch is emitted) and the end of
// the previous write (a gRPC thread). Whichever finds no write in flight
// builds the next message: its header (server/batch_message.h), then the
// stream's transport hands over the images (server/transport.h; for INLINE
// streams that is a memcpy of the batch's bytes into the message, most
// often on the worker that finished the batch). Nothing here waits: a Pump
// that finds the lock taken leaves a note (pump_wanted_) for the holder
// instead.
//
// The RPC ends once: the first reason (stream end, stream error, bad
// request, cancel) is recorded in end_, and Finish is called when no write is
// in flight — and, when the stream ended by itself and its transport says
// the client may still need the call (MustWaitForClient: a shared-memory
// client that has not fetched its region yet), once the transport wakes it,
// or the service's handover_grace after the end if it never does. OnDone
// detaches the reactor from gate_ (which engine threads, the transports and
// the alarm reach only through a shared_ptr) before the reactor is deleted.
//
// Locking: gate_->mu before mu_ before the engine's lock; Stream::Cancel (it
// runs ready callbacks, which take gate_->mu and mu_) is never called with
// either held.
class StreamReactor final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage> {
 public:
  StreamReactor(ConveyorService* service, std::string peer)
      : service_(service), peer_(std::move(peer)), gate_(std::make_shared<Gate>()) {
    {
      MutexLock lock(&gate_->mu);
      gate_->reactor = this;
    }
    if (service_->shutting_down()) {
      MutexLock lock(&mu_);
      EndLocked(absl::UnavailableError("daemon shutting down"));
      PumpLocked();
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call is being cancelled). Batches keep
      // flowing while there are credits; no more reads.
      MutexLock lock(&mu_);
      if (stream_ == nullptr) {
        EndLocked(absl::InvalidArgumentError(
            "the client closed the stream before sending OpenStream"));
      }
    } else {
      switch (request_.kind_case()) {
        case v1::ClientMessage::kOpen:
          HandleOpen(request_.open());
          break;
        case v1::ClientMessage::kRelease:
          HandleRelease(request_.release());
          break;
        default: {
          MutexLock lock(&mu_);
          EndLocked(absl::InvalidArgumentError("empty ClientMessage (set open or release)"));
          break;
        }
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
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

  void OnCancel() override {
    Stream* to_cancel = nullptr;
    {
      MutexLock lock(&mu_);
      EndLocked(absl::CancelledError("call cancelled"));
      to_cancel = stream_;
    }
    // Frees the stream's work at once; its slots go with the session in OnDone.
    if (to_cancel != nullptr) to_cancel->Cancel(absl::CancelledError("client went away"));
    Pump();
  }

  void OnDone() override {
    {
      // After this no other thread can reach the reactor: a wake either
      // finished already or will find the gate empty.
      MutexLock lock(&gate_->mu);
      gate_->reactor = nullptr;
      while (gate_->callers > 0) gate_->idle.Wait(&gate_->mu);
    }
    std::unique_ptr<Session> session;
    absl::Status end;
    uint64_t batches = 0, samples = 0, failed = 0;
    {
      MutexLock lock(&mu_);
      session = std::move(session_);
      end = end_.value_or(absl::OkStatus());
      batches = total_batches_;
      samples = total_samples_;
      failed = total_failed_;
    }
    if (session != nullptr) {
      session->stream().SetReadyCallback(nullptr);
      session->transport().Finish(end);
      if (end.ok()) {
        spdlog::info("stream {} done: {} batches, {} samples, {} failed", session->id(), batches,
                     samples, failed);
      } else {
        spdlog::info("stream {} ended ({}: {}) after {} batches, {} samples", session->id(),
                     static_cast<int>(end.code()), std::string(end.message()), batches, samples);
      }
    }
    session.reset();  // cancels the core stream, frees its budget and transport
    delete this;
  }

 private:
  // How threads other than gRPC's reach the reactor. Wakers register as
  // callers under `mu` and pump outside it, so that concurrent wakers never
  // queue behind a pump in progress (Pump's TryLock hands the work to it);
  // OnDone clears `reactor` and waits for the callers to leave.
  struct Gate {
    Mutex mu;
    CondVar idle;  // signalled when callers drops to 0
    StreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    int callers ABSL_GUARDED_BY(mu) = 0;
  };

  // Runs `fn` on the reactor unless OnDone has begun.
  template <typename Fn>
  static void WithReactor(const std::shared_ptr<Gate>& gate, Fn fn) {
    StreamReactor* reactor = nullptr;
    {
      MutexLock lock(&gate->mu);
      if (gate->reactor == nullptr) return;
      reactor = gate->reactor;
      ++gate->callers;
    }
    fn(reactor);
    bool last = false;
    {
      MutexLock lock(&gate->mu);
      last = --gate->callers == 0;
    }
    if (last) gate->idle.SignalAll();
  }

  // The stream's ready callback and the transport's and service's wakes
  // (an engine worker, the fd socket's thread, the thread in
  // Stream::Release/Cancel or BeginShutdown; no engine lock held).
  static void Wake(const std::shared_ptr<Gate>& gate) {
    WithReactor(gate, [](StreamReactor* r) { r->Pump(); });
  }

  // The hand-over alarm (a gRPC thread).
  static void Expire(const std::shared_ptr<Gate>& gate) {
    WithReactor(gate, [](StreamReactor* r) {
      r->wait_expired_.store(true, std::memory_order_release);
      r->Pump();
    });
  }

  // Moves the stream on without waiting: if another thread holds mu_, it
  // will see pump_wanted_ after it lets go and pump for us.
  void Pump() {
    pump_wanted_.store(true, std::memory_order_release);
    while (pump_wanted_.load(std::memory_order_acquire)) {
      if (!mu_.TryLock()) return;
      pump_wanted_.store(false, std::memory_order_relaxed);
      PumpLocked();
      mu_.Unlock();
    }
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!finished_ && !write_in_flight_) {
      if (!queue_.empty()) {
        writing_ = std::move(queue_.front());
        queue_.pop_front();
        write_in_flight_ = true;
        StartWrite(&writing_);
        return;
      }
      if (end_.has_value()) {
        // The stream ended by itself: its client may still need the call
        // (and with it the session) to read what it was sent.
        if (ended_by_stream_ && session_->transport().MustWaitForClient(*end_) &&
            !service_->shutting_down()) {
          if (!wait_alarm_set_) {
            // A client that never comes is not waited for forever: it
            // cannot have wanted the batches.
            wait_alarm_set_ = true;
            wait_alarm_.Set(std::chrono::system_clock::now() + service_->options().handover_grace,
                            [gate = gate_](bool /*fired*/) { Expire(gate); });
          }
          if (!wait_expired_.load(std::memory_order_acquire)) {
            return;  // woken by the transport, by shutdown or by the alarm
          }
        }
        finished_ = true;
        Finish(ToGrpcStatus(*end_));
        return;
      }
      if (stream_ == nullptr) return;
      BatchInfo batch;
      absl::Status error;
      switch (stream_->TryNext(&batch, &error)) {
        case Stream::Poll::kNotReady:
          return;
        case Stream::Poll::kBatch:
          AddBatchLocked(batch);
          break;
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

  // Records why the RPC ends (the first reason wins). An error drops the
  // messages not yet written.
  void EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Client gone, bad request, shutdown: no one to wait for.
    ended_by_stream_ = false;
    if (end_.has_value()) return;
    if (!status.ok()) queue_.clear();
    end_ = std::move(status);
  }

  void HandleOpen(const v1::OpenStream& open) {
    {
      MutexLock lock(&mu_);
      if (stream_ != nullptr) {
        EndLocked(absl::InvalidArgumentError("OpenStream sent twice"));
        return;
      }
      if (end_.has_value()) return;  // cancelled meanwhile
    }
    absl::StatusOr<std::unique_ptr<Session>> session =
        service_->OpenStream(open, peer_, [gate = gate_] { Wake(gate); });
    if (!session.ok()) {
      spdlog::info("stream request from {} for pipeline '{}' refused: {}", peer_, open.pipeline(),
                   session.status().ToString());
      MutexLock lock(&mu_);
      EndLocked(session.status());
      return;
    }
    const StreamOptions& o = (*session)->stream().options();
    spdlog::info(
        "stream {} opened by {}: pipeline {}, batch_size {}, credits {}, {}, rank {}/{}, epochs "
        "{}+{}, epoch offset {}",
        (*session)->id(), peer_, open.pipeline(), o.batch_size, o.num_slots,
        TransportName((*session)->transport_kind()), o.rank, o.world_size, o.first_epoch,
        o.num_epochs, o.epoch_offset);
    Stream* stream = &(*session)->stream();
    stream->SetReadyCallback([gate = gate_] { Wake(gate); });
    {
      MutexLock lock(&mu_);
      v1::ServerMessage m;
      *m.mutable_opened() = (*session)->opened();
      queue_.push_back(std::move(m));
      session_ = *std::move(session);
      stream_ = stream;
      if (end_.has_value()) return;  // cancelled while opening: OnDone cleans up
    }
    StartRead(&request_);
  }

  void HandleRelease(const v1::Release& release) {
    Stream* stream = nullptr;
    {
      MutexLock lock(&mu_);
      if (stream_ == nullptr) {
        EndLocked(absl::InvalidArgumentError("Release before OpenStream"));
        return;
      }
      stream = stream_;
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
    if (!end_.has_value()) StartRead(&request_);
  }

  void AddBatchLocked(const BatchInfo& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::ServerMessage m;
    FillBatchHeader(b, *stream_, m.mutable_batch());
    session_->transport().Deliver(b, m.mutable_batch());
    queue_.push_back(std::move(m));

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

  ConveyorService* const service_;
  const std::string peer_;
  const std::shared_ptr<Gate> gate_;
  v1::ClientMessage request_;  // touched by the read reactions only (one at a time)
  std::atomic<bool> pump_wanted_{false};

  Mutex mu_;
  std::unique_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  // The session's stream, set once with it and valid until OnDone.
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::ServerMessage writing_ ABSL_GUARDED_BY(mu_);  // owned by gRPC while write_in_flight_
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  // end_ came from the stream (its end or its error), not from the call
  // (cancel, bad request, shutdown): only then may the client still read.
  bool ended_by_stream_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called
  // Finish may wait for the client, at most handover_grace after the end
  // (see PumpLocked).
  bool wait_alarm_set_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> wait_expired_{false};
  grpc::Alarm wait_alarm_;  // cancelled by its destructor
  uint64_t epoch_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_failed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

grpc::ServerUnaryReactor* GrpcConveyorService::ListPipelines(
    grpc::CallbackServerContext* context, const v1::ListPipelinesRequest* /*request*/,
    v1::ListPipelinesResponse* response) {
  *response = service_->ListPipelines();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GrpcConveyorService::GetStats(grpc::CallbackServerContext* context,
                                                        const v1::GetStatsRequest* /*request*/,
                                                        v1::GetStatsResponse* response) {
  *response = service_->GetStats();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage>* GrpcConveyorService::StreamBatches(
    grpc::CallbackServerContext* context) {
  return new StreamReactor(service_, context->peer());
}

}  // namespace conveyor::server
