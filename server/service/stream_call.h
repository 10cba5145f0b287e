// StreamCall: the protocol of one StreamBatches call, with no gRPC type in
// it, so that tests can drive it message by message. The gRPC reactor
// (server/service/grpc_service.cc) is a thin adapter: its reactions forward here,
// and it carries out what the call asks of its RPC (Rpc: start a read or a
// write, finish, set the wait alarm).
//
// Reading: one read is outstanding until the stream ends; OpenStream opens
// the core stream (ConveyorService::OpenStream), Release returns slots
// (checked against the batch sequences it names, when it names them: see
// conveyor.v1.Release).
// Writing: messages go out one at a time from a queue (StreamOpened, Batch,
// EpochEnd, StreamEnd); when the queue is empty the call polls the core
// stream (TryNext). Polling happens in Pump(), from two places: the
// stream's ready callback (an engine worker, after a batch is emitted) and
// the end of the previous write (a gRPC thread). Whichever finds no write
// in flight builds the next message: its header (server/service/batch_message.h),
// then the stream's transport hands over the images (server/transport/transport.h;
// for INLINE streams that is a memcpy of the batch's bytes into the
// message, most often on the worker that finished the batch). Nothing here
// waits: a Pump that finds the lock taken leaves a note for the holder.
//
// Data wait: the call measures, per batch, how long its client waited for
// it — from the moment the client had a free credit (the stream opened; a
// Release gave a credit back to a client that held them all; the previous
// batch went out while a credit was still free) until the batch is handed
// to the transport — and counts it in the pipeline's histogram
// (Session::CountDataWait). A wait that no batch ends (the stream's end) is
// not counted.
//
// Refusals: a call refused before its stream opened (shutting down, or
// ConveyorService::OpenStream's error) is counted by its status code
// (ConveyorService::CountRefusedStream).
//
// The call ends once: the first reason (stream end, stream error, bad
// request, cancel) is recorded, and Rpc::Finish is called when no write is
// in flight — and, when the stream ended by itself and its transport says
// the client may still need the call (MustWaitForClient: a shared-memory
// client that has not fetched its region yet), once the transport wakes it,
// or ServiceOptions::handover_grace after the end (Rpc::SetWaitDeadline,
// then Expire) if it never does.
//
// Thread-safety: the reactions (Start, OnRead, OnWriteDone, OnCancel,
// Detach) come from gRPC, one read and one write reaction at a time; wakes
// come from any thread. Engine threads, the transports and the alarm reach
// the call only through a shared gate that Detach() closes, after which
// none of them touches the call. Locking: the gate before the call's mutex
// before the engine's lock; Stream::Cancel (it runs ready callbacks, which
// take both) is never called with either held. Rpc methods are called with
// the call's mutex held and must not call back into the call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "conveyor/v1/conveyor.pb.h"
#include "core/base/mutex.h"
#include "server/service/service.h"

namespace conveyor::server {

class StreamCall {
 public:
  // What the call needs from its RPC.
  class Rpc {
   public:
    virtual ~Rpc() = default;
    // Reads the next client message; its end comes back as OnRead.
    virtual void StartRead() = 0;
    // Writes `message` (owned by the call until OnWriteDone).
    virtual void StartWrite(const v1::ServerMessage* message) = 0;
    // Ends the RPC with `status`; called once.
    virtual void Finish(const absl::Status& status) = 0;
    // Calls `expire` (from any thread) at `deadline` or when the RPC is
    // torn down, whichever comes first; called at most once.
    virtual void SetWaitDeadline(std::chrono::system_clock::time_point deadline,
                                 std::function<void()> expire) = 0;
    // Ends the RPC at once (the client sees CANCELLED), dropping what is
    // not written: for a client that stopped reading, whose last write
    // would never complete. Called WITHOUT the call's mutex (the RPC's
    // reactions may run inside it), from any thread while attached.
    virtual void Cancel() = 0;
  };

  // `service` and `rpc` are not owned and outlive the call.
  StreamCall(ConveyorService* service, ClientIdentity client, Rpc* rpc);
  ~StreamCall();  // REQUIRES: Detach() was called
  StreamCall(const StreamCall&) = delete;
  StreamCall& operator=(const StreamCall&) = delete;

  // The RPC has begun: the first read, or UNAVAILABLE when shutting down.
  void Start();
  // A read ended: `message` is the client's message, or null when the
  // client half-closed (or the RPC is going).
  void OnRead(const v1::ClientMessage* message);
  // A read ended with bytes that are not a ClientMessage: the call ends
  // INVALID_ARGUMENT.
  void OnUnparseable();
  // The write in flight ended; !ok: the client is gone.
  void OnWriteDone(bool ok);
  // The RPC was cancelled (client gone, deadline, server shutdown).
  void OnCancel();
  // The RPC is over (after Finish): cuts the call off from every other
  // thread, waits for those inside it to leave, and ends the session (the
  // core stream is cancelled, its budget and transport given back).
  void Detach();

 private:
  using Clock = std::chrono::steady_clock;
  struct Gate;

  static void Wake(const std::shared_ptr<Gate>& gate);
  static void Expire(const std::shared_ptr<Gate>& gate);
  // The service ended the stream for idleness and the call is still there.
  static void Abort(const std::shared_ptr<Gate>& gate);
  void Pump();
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleOpen(const v1::OpenStream& open);
  void HandleRelease(const v1::Release& release);
  // Checks a Release against the batches delivered and not released (and
  // forgets those it releases): a sequence that does not match its slot's.
  absl::Status CheckReleaseLocked(const v1::Release& release) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddBatchLocked(const BatchInfo& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ConveyorService* const service_;
  const ClientIdentity client_;
  Rpc* const rpc_;
  const std::shared_ptr<Gate> gate_;
  std::atomic<bool> pump_wanted_{false};
  std::atomic<bool> wait_expired_{false};

  Mutex mu_;
  std::unique_ptr<Session> session_ ABSL_GUARDED_BY(mu_);
  // The session's stream, set once with it and valid until Detach.
  Stream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  // Slot -> Batch.sequence of the batch delivered in it and not released.
  std::unordered_map<uint32_t, uint64_t> held_ ABSL_GUARDED_BY(mu_);
  v1::ServerMessage writing_ ABSL_GUARDED_BY(mu_);  // the RPC's while write_in_flight_
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> end_ ABSL_GUARDED_BY(mu_);
  // end_ came from the stream (its end or its error), not from the call
  // (cancel, bad request, shutdown): only then may the client still read.
  bool ended_by_stream_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Rpc::Finish called
  bool wait_deadline_set_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_batches_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_samples_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t total_failed_ ABSL_GUARDED_BY(mu_) = 0;
  // The stream's credits (slots), and since when its client has waited
  // with a free one for a batch (unset: it holds all its credits, or no
  // stream yet).
  uint32_t credits_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<Clock::time_point> waiting_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace conveyor::server
