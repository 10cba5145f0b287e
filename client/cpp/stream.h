// Stream and BatchLease: one StreamBatches call of the C++ client and the
// batches it hands out (see proto/conveyor/v1/conveyor.proto for the
// protocol and client.h for how a Stream is opened).
//
// A BatchLease is one batch the caller holds. Its images are read in place:
//   - SHARED_MEMORY (unix socket): a view of the daemon's slot in the
//     stream's memfd, mapped once when the stream opened;
//   - DATA_SOCKET (TCP): the client's buffer of that slot, into which the
//     bytes were read from the data socket (reused only after release);
//   - INLINE: the bytes of the Batch message, owned by the lease;
//   - DEVICE_MEMORY (unix socket): the daemon's device buffer of that slot
//     on the GPU named by StreamOptions::gpu_uuid, imported once with the
//     CUDA driver: device_pointer() is its address and images() is nullptr
//     (under the daemon's host model, a test aid, both give the mapped
//     bytes). A batch is sent only once its bytes are on the device, so it
//     is ready on arrival: there is no stream or event to wait on.
// Each kind is one object behind transport/client_transport.h.
// The lease is move-only; destroying it (or Release()) sends the Release of
// its slot with its sequence, which gives the daemon its credit back. After
// that its images belong to the daemon again: do not keep pointers to them.
// The memory itself stays mapped for as long as any lease of the stream is
// alive, even after the Stream is destroyed, so a lease outliving its
// stream reads stale-but-mapped bytes, never unmapped memory.
//
// Credits: the daemon never has more than `credits` batches of the stream
// unreleased. Next() refuses (FailedPrecondition) to take a batch while the
// caller holds all of them, instead of waiting for a batch the daemon will
// not send.
//
// Resume state: after each batch taken, resume_state() is where a new
// stream must start to continue right after it (epoch, offset in the
// epoch's global order, world size): pass it as StreamOptions::resume.
//
// Sample fields: each lease carries its batch's fields (fields(), see
// fields.h), checked against the pipeline's declared ones on receipt.
//
// Errors are values: the daemon's gRPC status comes back with its code and
// message (naming the stream and pipeline); a batch whose fields do not fit
// together (its sample fields included) is Internal ("protocol error:
// ..."); a broken data socket is Unavailable. After an error the stream is
// finished; Next() repeats it.
//
// Thread-safety: Next(), Close() and the accessors of a Stream are called
// from one thread at a time (the consumer's). A BatchLease may be released
// or destroyed on any thread, concurrently with Next() and with other
// leases; a single lease is not shared between threads without locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/fields.h"
#include "client/cpp/transport/client_transport.h"
#include "conveyor/v1/conveyor.grpc.pb.h"
#include "core/base/mutex.h"

namespace conveyor::client {

namespace v1 = ::conveyor::v1;

namespace internal {
struct StreamCall;  // the gRPC call, the memory and the held slots (stream.cc)
struct PoolState;   // pool/pool_stream.cc
}  // namespace internal

// Where a stream starts again (ResumePosition of the proto).
struct ResumeState {
  uint64_t epoch = 0;
  uint64_t offset = 0;      // samples of the epoch's global order all ranks consumed
  uint32_t world_size = 1;  // the world size it was saved at (informational)
};

// Cancels one stream's call from any thread, whether the stream is still
// being opened (Client::OpenStream blocked on StreamOpened) or open (its
// Next() blocked on a batch): either then returns CANCELLED. A canceller
// given to a stream that was cancelled already cancels it at once. Leases
// taken before stay readable (as after Close()). Thread-safe.
class StreamCanceller {
 public:
  void Cancel();
  bool cancelled() const;

 private:
  friend class Stream;
  // The stream's call (Stream::Open): cancelled now if Cancel() came first.
  void Attach(const std::shared_ptr<internal::StreamCall>& call);

  mutable Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::weak_ptr<internal::StreamCall> call_ ABSL_GUARDED_BY(mu_);
};

// An OpenStream request (see the proto for each field's range).
struct StreamOptions {
  std::string pipeline;
  uint32_t batch_size = 0;
  uint64_t seed = 0;
  uint64_t first_epoch = 0;
  uint64_t num_epochs = 1;  // 0: endless
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint32_t credits = 4;  // batches the caller may hold unreleased
  bool shuffle = true;
  bool drop_last = false;
  // TRANSPORT_AUTO: shared memory on a unix socket, the data socket over TCP
  // (inline when the daemon has none).
  v1::Transport transport = v1::TRANSPORT_AUTO;
  std::optional<ResumeState> resume;  // absent: first_epoch, position 0
  // > 0: the stream ends after this many batches (OpenStream.max_batches):
  // with `resume`, any range of a rank's batches.
  uint64_t max_batches = 0;
  // Optional: cancels the call from another thread (see StreamCanceller).
  std::shared_ptr<StreamCanceller> canceller;
  // Connecting to the fd hand-over or data socket, and its handshake.
  absl::Duration side_timeout = absl::Seconds(10);
  // Longest silence of the data socket in the middle of a batch.
  absl::Duration data_read_timeout = absl::Seconds(120);
  // SHARED_MEMORY: page-lock the mapped region once for CUDA (the driver,
  // loaded at run time, registers it PORTABLE with the primary context of
  // the GPU gpu_uuid names, device 0 when empty), so that host-to-device
  // copies from a batch are asynchronous; unregistered at close. Without a
  // CUDA driver or device the open fails with FAILED_PRECONDITION naming
  // why; on another transport it is INVALID_ARGUMENT.
  bool pin_memory = false;
  // The GPU ("GPU-8c5b0c1e-…" as `nvidia-smi -L` prints it): required for
  // transport DEVICE_MEMORY (sent as OpenStream.device), and the device
  // pin_memory registers for.
  std::string gpu_uuid;
};

// Bytes of one element of `dtype`; 0 for an unknown dtype.
size_t DTypeBytes(v1::DType dtype);

class BatchLease {
 public:
  BatchLease() = default;
  ~BatchLease() { Release(); }
  BatchLease(BatchLease&& other) noexcept = default;
  BatchLease& operator=(BatchLease&& other) noexcept;
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;

  // Gives the slot back to the daemon. Idempotent; afterwards valid() is
  // false and the accessors below must not be used.
  void Release();
  bool valid() const { return call_ != nullptr; }

  // REQUIRES: valid().
  // The host-readable bytes; nullptr for a DEVICE_MEMORY batch on a GPU.
  const uint8_t* images() const { return bytes_.host; }
  size_t images_bytes() const { return header_.images_bytes(); }
  // DEVICE_MEMORY: the device address (CUdeviceptr) of the images, ready to
  // read (no stream or event to wait on); 0 for host transports.
  uint64_t device_pointer() const { return bytes_.device; }
  bool on_device() const { return bytes_.device != 0; }
  // Copies the images_bytes() bytes into `out` (a device-to-host copy for
  // device bytes).
  absl::Status CopyImages(uint8_t* out) const;
  // Everything else the daemon said of the batch: sequence, epoch,
  // batch_in_epoch, position, offset, end_of_epoch, num_samples, shape,
  // dtype, layout, slot, labels, sample_indices, failures. Its `images`
  // field is empty (the bytes are behind images()), and so is its `fields`
  // (they are behind fields()).
  const v1::Batch& header() const { return header_; }
  // The sample fields (fields.h): the pipeline's declared fields, in their
  // order, each with one value per sample, checked when the batch arrived.
  // They are the lease's own bytes (they come in the batch message, not in
  // the slot): valid as long as the lease, moved or not.
  std::span<const Field> fields() const { return fields_; }
  // The field called `name`, or nullptr.
  const Field* field(std::string_view name) const { return FindField(fields_, name); }

 private:
  friend class Stream;
  // Counts batch_in_epoch and position over the epoch (pool/pool_stream.h).
  friend struct internal::PoolState;
  std::shared_ptr<internal::StreamCall> call_;
  v1::Batch header_;
  BatchBytes bytes_;           // where the images are (INLINE: owns them)
  std::vector<Field> fields_;  // one heap block: a move of the lease moves no Field
};

class Stream {
 public:
  ~Stream();  // Close()
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The next batch; nullopt once the stream ended (StreamEnd). Blocks until
  // the daemon sends it. FailedPrecondition while all credits are held.
  absl::StatusOr<std::optional<BatchLease>> Next();

  // Cancels the call if it still runs. Leases still held stay readable (see
  // above) and their release is then a no-op. Idempotent.
  void Close();

  // What the daemon answered to OpenStream (transport, stream_id,
  // batches_per_epoch, samples_per_epoch, pipeline, num_slots, ...).
  const v1::StreamOpened& opened() const { return opened_; }
  uint32_t credits() const { return credits_; }
  // Where to resume after the last batch taken (the request's start before
  // the first one).
  const ResumeState& resume_state() const { return resume_; }
  // Batches taken and not yet released (any thread's leases).
  size_t held() const;
  // Set once the stream ended normally.
  const std::optional<v1::StreamEnd>& end() const { return end_; }
  const std::vector<v1::EpochEnd>& epoch_ends() const { return epoch_ends_; }

 private:
  friend class Client;
  Stream(std::shared_ptr<internal::StreamCall> call, const StreamOptions& options);
  // Opens the call: OpenStream, StreamOpened, then the fd hand-over or the
  // data socket. `data_host`: the TCP host (nullopt on a unix socket).
  static absl::StatusOr<std::unique_ptr<Stream>> Open(std::shared_ptr<grpc::Channel> channel,
                                                      v1::Conveyor::Stub& stub,
                                                      const StreamOptions& options,
                                                      const std::optional<std::string>& data_host,
                                                      const std::string& token);
  absl::StatusOr<BatchLease> Take(v1::Batch batch);
  // Ends the call after an error (cancelling it) and remembers `status`.
  absl::Status Fail(absl::Status status);

  const std::shared_ptr<internal::StreamCall> call_;
  const std::string pipeline_;  // the pipeline's name, escaped and quoted, for messages
  const uint32_t credits_;
  const uint32_t world_size_;
  v1::StreamOpened opened_;
  ResumeState resume_;
  std::optional<v1::StreamEnd> end_;
  std::vector<v1::EpochEnd> epoch_ends_;
  absl::Status final_status_;  // the error that ended the stream
  bool finished_ = false;      // StreamEnd, an error or Close()
};

}  // namespace conveyor::client
