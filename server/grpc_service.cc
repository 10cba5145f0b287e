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
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

namespace {

// How long a shared-memory stream that has ended waits for its client to
// fetch the region before the call is finished anyway.
constexpr std::chrono::seconds kHandOverGrace(10);

// Whether a stream that ended with `code` still has a client that will read
// the batches already sent (fetch the region, drain the data socket): not
// when the client went away (CANCELLED) or the daemon is going
// (UNAVAILABLE). absl and gRPC share the code numbers.
bool ClientStillReads(int code) {
  return code != static_cast<int>(absl::StatusCode::kCancelled) &&
         code != static_cast<int>(absl::StatusCode::kUnavailable);
}

const char* TransportName(v1::Transport t) {
  switch (t) {
    case v1::SHARED_MEMORY:
      return "shared_memory";
    case v1::INLINE:
      return "inline";
    case v1::DATA_SOCKET:
      return "data_socket";
    default:
      return "auto";
  }
}

// One StreamBatches call. Reading: one read is always outstanding until the
// stream ends; OpenStream opens the core stream, Release returns slots.
// Writing: messages go out one at a time from queue_ (StreamOpened, Batch,
// EpochEnd, StreamEnd); when the queue is empty the reactor polls the core
// stream (TryNext). Polling happens in Pump(), from two places: the stream's
// ready callback (an engine worker, after a batch is emitted) and the end of
// the previous write (a gRPC thread). Whichever finds no write in flight
// builds the next message. For INLINE streams that includes the copy of the
// batch's images into the message (a memcpy of batch bytes; most batches are
// picked up by the worker that finished them, a backlog by the gRPC thread
// that finished the previous write); for DATA_SOCKET streams it queues the
// batch's images on the stream's data socket (server/data_socket_server.h),
// whose own thread writes them. Nothing here waits: a Pump that finds
// the lock taken leaves a note (pump_wanted_) for the holder instead.
//
// The RPC ends once: the first reason (stream end, stream error, bad
// request, cancel) is recorded in end_, and Finish is called when no write is
// in flight — and, for a shared-memory stream that ended by itself, once the
// client has fetched its region (a short stream can be fully produced before
// the client asks for the memfd, and Finish destroys the session the fd
// socket looks the region up in), or kHandOverGrace after the end if it never
// does. OnDone detaches the ready callback through gate_ (which engine
// threads, the fd socket and the alarm reach only through a shared_ptr)
// before the reactor is deleted.
//
// Locking: gate_->mu before mu_ before the engine's lock; Stream::Cancel (it
// runs ready callbacks, which take gate_->mu and mu_) is never called with
// either held.
class StreamReactor final : public grpc::ServerBidiReactor<v1::ClientMessage, v1::ServerMessage> {
 public:
  StreamReactor(ConveyorService* service, std::string peer)
      : service_(service), peer_(std::move(peer)), gate_(std::make_shared<Gate>()) {
    {
      absl::MutexLock lock(&gate_->mu);
      gate_->reactor = this;
    }
    if (service_->shutting_down()) {
      absl::MutexLock lock(&mu_);
      EndLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "daemon shutting down"));
      PumpLocked();
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call is being cancelled). Batches keep
      // flowing while there are credits; no more reads.
      absl::MutexLock lock(&mu_);
      if (stream_ == nullptr) {
        EndLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
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
          absl::MutexLock lock(&mu_);
          EndLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "empty ClientMessage (set open or release)"));
          break;
        }
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    Stream* to_cancel = nullptr;
    {
      absl::MutexLock lock(&mu_);
      write_in_flight_ = false;
      if (!ok) {
        EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "write failed: client went away"));
        to_cancel = stream_;
      }
    }
    if (to_cancel != nullptr) to_cancel->Cancel(absl::CancelledError("client went away"));
    Pump();
  }

  void OnCancel() override {
    Stream* to_cancel = nullptr;
    {
      absl::MutexLock lock(&mu_);
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"));
      to_cancel = stream_;
    }
    // Frees the stream's work at once; its slots go with the session in OnDone.
    if (to_cancel != nullptr) to_cancel->Cancel(absl::CancelledError("client went away"));
    Pump();
  }

  void OnDone() override {
    {
      // After this no engine thread can reach the reactor: a ready callback
      // either finished under gate_->mu already or will find it empty.
      absl::MutexLock lock(&gate_->mu);
      gate_->reactor = nullptr;
    }
    std::unique_ptr<Session> session;
    grpc::Status end;
    uint64_t batches = 0, samples = 0, failed = 0;
    {
      absl::MutexLock lock(&mu_);
      session = std::move(session_);
      end = end_.value_or(grpc::Status::OK);
      batches = total_batches_;
      samples = total_samples_;
      failed = total_failed_;
    }
    if (session != nullptr) {
      session->stream().SetReadyCallback(nullptr);
      // Batches already sent over gRPC stay readable on the data socket
      // after the call ends (Session's destructor closes the channel, which
      // flushes them), unless nobody is left to read them.
      if (DataSocketServer::Channel* data = session->data_channel();
          data != nullptr && !ClientStillReads(end.error_code())) {
        data->Abort();
      }
      if (end.ok()) {
        spdlog::info("stream {} done: {} batches, {} samples, {} failed", session->id(), batches,
                     samples, failed);
      } else {
        spdlog::info("stream {} ended ({}: {}) after {} batches, {} samples", session->id(),
                     static_cast<int>(end.error_code()), end.error_message(), batches, samples);
      }
    }
    session.reset();  // cancels the core stream, frees its budget and fd
    delete this;
  }

 private:
  struct Gate {
    absl::Mutex mu;
    StreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  // The stream's ready callback (an engine worker or the thread in
  // Stream::Release/Cancel; no engine lock held). A reader lock: concurrent
  // wakers do not queue behind a pump in progress (Pump's TryLock hands the
  // work to it); only OnDone, which clears `reactor`, takes it exclusively.
  static void Wake(const std::shared_ptr<Gate>& gate) {
    absl::ReaderMutexLock lock(&gate->mu);
    if (gate->reactor != nullptr) gate->reactor->Pump();
  }

  // The hand-over alarm (a gRPC thread).
  static void Expire(const std::shared_ptr<Gate>& gate) {
    absl::ReaderMutexLock lock(&gate->mu);
    if (gate->reactor == nullptr) return;
    gate->reactor->handover_expired_.store(true, std::memory_order_release);
    gate->reactor->Pump();
  }

  // Moves the stream on without waiting: if another thread holds mu_, it
  // will see pump_wanted_ after it lets go and pump for us.
  void Pump() ABSL_NO_THREAD_SAFETY_ANALYSIS {
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
        // A shared-memory client may read StreamEnd (or a data error)
        // before it fetched the region; the session (and with it the
        // registry entry the fd socket consults) must outlive the hand-over.
        if (hold_for_handover_ && !session_->region_handed_over() && !service_->shutting_down()) {
          if (!handover_alarm_set_) {
            // A client that never fetches its region is not waited for
            // forever: it cannot have wanted the pixels.
            handover_alarm_set_ = true;
            handover_alarm_.Set(std::chrono::system_clock::now() + kHandOverGrace,
                                [gate = gate_](bool /*fired*/) { Expire(gate); });
          }
          if (!handover_expired_.load(std::memory_order_acquire)) {
            return;  // woken by the hand-over, by shutdown or by the alarm
          }
        }
        finished_ = true;
        Finish(*end_);
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
          end_ = grpc::Status::OK;
          hold_for_handover_ = shared_memory_;
          break;
        }
        case Stream::Poll::kError:
          end_ = ToGrpcStatus(error);
          // The batches before a data error are delivered and readable.
          hold_for_handover_ =
              shared_memory_ && ClientStillReads(static_cast<int>(error.code()));
          break;
      }
    }
  }

  // Records why the RPC ends (the first reason wins). An error drops the
  // messages not yet written.
  void EndLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    hold_for_handover_ = false;  // client gone, bad request: no one to wait for
    if (end_.has_value()) return;
    if (!status.ok()) queue_.clear();
    end_ = std::move(status);
  }

  void HandleOpen(const v1::OpenStream& open) {
    {
      absl::MutexLock lock(&mu_);
      if (stream_ != nullptr) {
        EndLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "OpenStream sent twice"));
        return;
      }
      if (end_.has_value()) return;  // cancelled meanwhile
    }
    absl::StatusOr<std::unique_ptr<Session>> session =
        service_->OpenStream(open, peer_, [gate = gate_] { Wake(gate); });
    if (!session.ok()) {
      spdlog::info("stream request from {} for pipeline '{}' refused: {}", peer_, open.pipeline(),
                   session.status().ToString());
      absl::MutexLock lock(&mu_);
      EndLocked(ToGrpcStatus(session.status()));
      return;
    }
    const StreamOptions& o = (*session)->stream().options();
    spdlog::info(
        "stream {} opened by {}: pipeline {}, batch_size {}, credits {}, {}, rank {}/{}, epochs "
        "{}+{}, epoch offset {}",
        (*session)->id(), peer_, open.pipeline(), o.batch_size, o.num_slots,
        TransportName((*session)->transport()), o.rank, o.world_size, o.first_epoch, o.num_epochs,
        o.epoch_offset);
    Stream* stream = &(*session)->stream();
    stream->SetReadyCallback([gate = gate_] { Wake(gate); });
    {
      absl::MutexLock lock(&mu_);
      v1::ServerMessage m;
      *m.mutable_opened() = (*session)->opened();
      queue_.push_back(std::move(m));
      shared_memory_ = (*session)->transport() == v1::SHARED_MEMORY;
      session_ = *std::move(session);
      stream_ = stream;
      if (end_.has_value()) return;  // cancelled while opening: OnDone cleans up
    }
    StartRead(&request_);
  }

  void HandleRelease(const v1::Release& release) {
    Stream* stream = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (stream_ == nullptr) {
        EndLocked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Release before OpenStream"));
        return;
      }
      stream = stream_;
    }
    for (uint32_t slot : release.slots()) {
      if (absl::Status st = stream->Release(slot); !st.ok()) {
        {
          absl::MutexLock lock(&mu_);
          EndLocked(ToGrpcStatus(st));
        }
        stream->Cancel(st);
        return;
      }
    }
    absl::MutexLock lock(&mu_);
    if (!end_.has_value()) StartRead(&request_);
  }

  void AddBatchLocked(const BatchInfo& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const BatchLayout& layout = stream_->layout();
    const SlotArena& arena = stream_->arena();
    const PipelineConfig& p = stream_->pipeline();
    const uint8_t* base = arena.slot(b.slot);
    const uint32_t n = b.num_samples;

    v1::ServerMessage m;
    v1::Batch* o = m.mutable_batch();
    o->set_sequence(b.sequence);
    o->set_epoch(b.epoch);
    o->set_batch_in_epoch(b.batch_in_epoch);
    o->set_position(b.position);
    o->set_offset(b.offset);
    o->set_epoch_samples(b.epoch_samples);
    o->set_end_of_epoch(b.end_of_epoch);
    o->set_num_samples(n);
    o->add_shape(n);
    const TransformSpec& t = p.transform;
    if (t.layout == Layout::kNCHW) {
      o->add_shape(3);
      o->add_shape(t.output_height);
      o->add_shape(t.output_width);
      o->set_layout(v1::NCHW);
    } else {
      o->add_shape(t.output_height);
      o->add_shape(t.output_width);
      o->add_shape(3);
      o->set_layout(v1::NHWC);
    }
    o->set_dtype(t.dtype == DType::kUint8     ? v1::UINT8
                 : t.dtype == DType::kFloat32 ? v1::FLOAT32
                                              : v1::FLOAT16);
    o->set_slot(b.slot);
    const uint64_t image_bytes = static_cast<uint64_t>(n) * layout.sample_bytes;
    o->set_images_bytes(image_bytes);
    if (shared_memory_) {
      o->set_images_offset(arena.slot_offset(b.slot) + layout.images_offset);
    } else if (DataSocketServer::Channel* data = session_->data_channel(); data != nullptr) {
      // Queued before the header is: the client reads the header, then
      // these bytes. The slot is not reused before the client releases it,
      // which it does only after reading them.
      data->Send(base + layout.images_offset, image_bytes, session_->stream_keep_alive());
    } else {
      o->set_images(reinterpret_cast<const char*>(base + layout.images_offset), image_bytes);
    }
    o->mutable_labels()->Resize(static_cast<int>(n), 0);
    std::memcpy(o->mutable_labels()->mutable_data(), base + layout.labels_offset,
                sizeof(int64_t) * n);
    o->mutable_sample_indices()->Resize(static_cast<int>(n), 0);
    std::memcpy(o->mutable_sample_indices()->mutable_data(), base + layout.indices_offset,
                sizeof(int64_t) * n);
    for (const SampleFailure& f : b.failures) {
      v1::SampleFailure* pf = o->add_failures();
      pf->set_sample_index(f.sample_index);
      pf->set_path(f.path);
      pf->set_reason(f.reason);
    }
    queue_.push_back(std::move(m));

    ++total_batches_;
    total_samples_ += n;
    total_failed_ += b.failures.size();
    ++epoch_batches_;
    epoch_samples_ += n;
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

  absl::Mutex mu_;
  std::unique_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  // The session's stream, set once with it and valid until OnDone.
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool shared_memory_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::ServerMessage writing_ ABSL_GUARDED_BY(mu_);  // owned by gRPC while write_in_flight_
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> end_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called
  // Finish waits until the client has fetched the region, at most
  // kHandOverGrace after the end (see PumpLocked).
  bool hold_for_handover_ ABSL_GUARDED_BY(mu_) = false;
  bool handover_alarm_set_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> handover_expired_{false};
  grpc::Alarm handover_alarm_;  // cancelled by its destructor
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
