#include "client/cpp/stream.h"

#include <grpcpp/grpcpp.h>

#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/transport/open_transport.h"
#include "core/base/mutex.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"

namespace conveyor::client {
namespace internal {

// What a stream's leases share with it: the gRPC call, the memory the
// batches live in and the set of slots held. Leases keep it alive, so the
// memory outlives the Stream object while a lease does.
struct StreamCall {
  using ReaderWriter = grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>;

  ~StreamCall() { End(/*cancel=*/true); }

  // Sends the Release of `slot` if it is held and the call still runs.
  // Any thread.
  void Release(uint32_t slot, uint64_t sequence) {
    {
      MutexLock lock(&mu);
      if (held.erase(slot) == 0 || done) return;
    }
    v1::ClientMessage msg;
    msg.mutable_release()->add_slots(slot);
    msg.mutable_release()->add_sequences(sequence);
    MutexLock lock(&write_mu);
    // A failed Write means the call is over: Next() reports why.
    if (!finished) rw->Write(msg);
  }

  // Ends the call (cancelling it first if `cancel`) and returns its status;
  // later calls return OK. Called by the Stream's thread (it reads).
  grpc::Status End(bool cancel) {
    {
      MutexLock lock(&mu);
      done = true;
    }
    if (rw == nullptr) return grpc::Status::OK;
    if (cancel) context.TryCancel();
    MutexLock lock(&write_mu);  // no Release is being written while the call ends
    if (finished) return grpc::Status::OK;
    finished = true;
    if (!cancel) rw->WritesDone();  // half-close: the daemon ends the call
    v1::ServerMessage ignored;
    while (rw->Read(&ignored)) {
    }
    return rw->Finish();
  }

  // Declared before `rw`, which must go first.
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext context;
  std::unique_ptr<ReaderWriter> rw;

  // Set once the stream is open: the batches' memory (its View() is called
  // by the Stream's thread only, for slots not held).
  std::unique_ptr<ClientTransport> transport;

  Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;  // no more Release messages
  std::set<uint32_t> held ABSL_GUARDED_BY(mu);
  // One Write at a time (gRPC allows one outstanding write beside a read),
  // and none after Finish.
  Mutex write_mu;
  bool finished ABSL_GUARDED_BY(write_mu) = false;
};

}  // namespace internal

namespace {

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

absl::Status Annotate(const absl::Status& status, absl::string_view what) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Bytes of a batch of `shape` and `dtype`, or a protocol error.
absl::StatusOr<uint64_t> ImageBytes(const v1::Batch& batch) {
  const size_t element = DTypeBytes(batch.dtype());
  if (element == 0) {
    return ProtocolError(absl::StrCat("batch ", batch.sequence(), " has unknown dtype ",
                                      static_cast<int>(batch.dtype())));
  }
  if (batch.shape().empty()) return 0;
  uint64_t bytes = element;
  for (int64_t dim : batch.shape()) {
    if (dim < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
      return ProtocolError(absl::StrCat("batch ", batch.sequence(), " has an impossible shape"));
    }
  }
  return bytes;
}

}  // namespace

void StreamCanceller::Cancel() {
  std::shared_ptr<internal::StreamCall> call;
  {
    MutexLock lock(&mu_);
    cancelled_ = true;
    call = call_.lock();
  }
  // TryCancel is thread-safe, and harmless on a call that is over.
  if (call != nullptr) call->context.TryCancel();
}

bool StreamCanceller::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

void StreamCanceller::Attach(const std::shared_ptr<internal::StreamCall>& call) {
  bool cancel = false;
  {
    MutexLock lock(&mu_);
    call_ = call;
    cancel = cancelled_;
  }
  if (cancel) call->context.TryCancel();
}

size_t DTypeBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::UINT8: return 1;
    case v1::FLOAT16: return 2;
    case v1::BFLOAT16: return 2;
    case v1::FLOAT32: return 4;
    default: return 0;
  }
}

// --- BatchLease ---------------------------------------------------------------

BatchLease& BatchLease::operator=(BatchLease&& other) noexcept {
  if (this != &other) {
    Release();
    call_ = std::move(other.call_);
    header_ = std::move(other.header_);
    bytes_ = std::exchange(other.bytes_, BatchBytes{});
    fields_ = std::move(other.fields_);
  }
  return *this;
}

absl::Status BatchLease::CopyImages(uint8_t* out) const {
  if (call_ == nullptr) return absl::FailedPreconditionError("the batch was released");
  return call_->transport->CopyToHost(bytes_, images_bytes(), out);
}

void BatchLease::Release() {
  if (call_ == nullptr) return;
  std::shared_ptr<internal::StreamCall> call = std::move(call_);
  call_ = nullptr;
  call->Release(header_.slot(), header_.sequence());
}

// --- Stream -------------------------------------------------------------------

Stream::Stream(std::shared_ptr<internal::StreamCall> call, const StreamOptions& options)
    : call_(std::move(call)),
      pipeline_(absl::StrCat("\"", EscapeText(options.pipeline, kClientStringCap), "\"")),
      credits_(options.credits),
      world_size_(options.world_size == 0 ? 1 : options.world_size) {
  resume_ = options.resume.value_or(ResumeState{options.first_epoch, 0, world_size_});
}

Stream::~Stream() { Close(); }

void Stream::Close() {
  if (finished_) return;
  finished_ = true;
  call_->End(/*cancel=*/true);
}

size_t Stream::held() const {
  MutexLock lock(&call_->mu);
  return call_->held.size();
}

absl::Status Stream::Fail(absl::Status status) {
  finished_ = true;
  final_status_ = status;
  call_->End(/*cancel=*/true);
  return status;
}

absl::StatusOr<std::unique_ptr<Stream>> Stream::Open(std::shared_ptr<grpc::Channel> channel,
                                                     v1::Conveyor::Stub& stub,
                                                     const StreamOptions& options,
                                                     const std::optional<std::string>& data_host,
                                                     const std::string& token) {
  v1::ClientMessage msg;
  v1::OpenStream& open = *msg.mutable_open();
  open.set_pipeline(options.pipeline);
  open.set_batch_size(options.batch_size);
  open.set_seed(options.seed);
  open.set_first_epoch(options.first_epoch);
  open.set_num_epochs(options.num_epochs);
  open.set_rank(options.rank);
  open.set_world_size(options.world_size);
  open.set_credits(options.credits);
  open.set_shuffle(options.shuffle);
  open.set_drop_last(options.drop_last);
  open.set_max_batches(options.max_batches);
  open.set_transport(options.transport);
  open.set_accept_data_socket(data_host.has_value());
  if (options.pin_memory && options.transport != v1::TRANSPORT_AUTO &&
      options.transport != v1::SHARED_MEMORY) {
    return absl::InvalidArgumentError(absl::StrCat(
        "opening a stream of pipeline \"", EscapeText(options.pipeline, kClientStringCap),
        "\": pin_memory needs a SHARED_MEMORY stream, not ",
        v1::Transport_Name(options.transport)));
  }
  if (options.transport == v1::DEVICE_MEMORY) {
    if (options.gpu_uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "opening a stream of pipeline \"", EscapeText(options.pipeline, kClientStringCap),
          "\": transport DEVICE_MEMORY needs gpu_uuid (the GPU's UUID, as nvidia-smi -L prints "
          "it)"));
    }
    open.mutable_device()->set_gpu_uuid(options.gpu_uuid);
  }
  if (options.resume) {
    open.set_first_epoch(options.resume->epoch);
    open.mutable_resume()->set_epoch(options.resume->epoch);
    open.mutable_resume()->set_offset(options.resume->offset);
    open.mutable_resume()->set_world_size(options.resume->world_size);
  }

  auto call = std::make_shared<internal::StreamCall>();
  call->channel = std::move(channel);
  if (!token.empty()) call->context.AddMetadata("authorization", "Bearer " + token);
  call->rw = stub.StreamBatches(&call->context);
  if (options.canceller != nullptr) options.canceller->Attach(call);
  std::unique_ptr<Stream> stream(new Stream(call, options));
  const std::string what = "opening a stream of pipeline " + stream->pipeline_;

  call->rw->Write(msg);  // a failure shows as the Read below failing
  v1::ServerMessage first;
  if (!call->rw->Read(&first)) {
    stream->finished_ = true;
    const grpc::Status status = call->End(/*cancel=*/false);
    if (status.ok()) {
      return absl::UnavailableError(
          absl::StrCat(what, ": the daemon closed the stream before answering StreamOpened"));
    }
    return FromGrpc(status, what);
  }
  if (!first.has_opened()) {
    return Annotate(
        ProtocolError(absl::StrCat("the first server message is of kind ",
                                   static_cast<int>(first.kind_case()), ", not StreamOpened")),
        what);
  }
  stream->opened_ = std::move(*first.mutable_opened());
  const v1::StreamOpened& op = stream->opened_;
  TransportOptions topts;
  topts.data_host = data_host;
  topts.side_timeout = options.side_timeout;
  topts.data_read_timeout = options.data_read_timeout;
  topts.pin_memory = options.pin_memory;
  topts.gpu_uuid = options.gpu_uuid;
  absl::StatusOr<std::unique_ptr<ClientTransport>> transport = OpenClientTransport(op, topts);
  if (!transport.ok()) return Annotate(transport.status(), what);
  call->transport = std::move(*transport);
  return stream;
}

absl::StatusOr<std::optional<BatchLease>> Stream::Next() {
  if (finished_) {
    if (!final_status_.ok()) return final_status_;
    return std::nullopt;
  }
  if (held() >= credits_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stream ", opened_.stream_id(), " of pipeline ", pipeline_, ": holding all ", credits_,
        " credits: release a batch (destroy its BatchLease) before taking another"));
  }
  const std::string what = absl::StrCat("stream ", opened_.stream_id(), " of pipeline ", pipeline_);
  v1::ServerMessage msg;
  while (true) {
    if (!call_->rw->Read(&msg)) {
      finished_ = true;
      const grpc::Status status = call_->End(/*cancel=*/false);
      final_status_ = status.ok() ? absl::UnavailableError(absl::StrCat(
                                        what, ": the daemon ended the stream without StreamEnd"))
                                  : FromGrpc(status, what);
      return final_status_;
    }
    switch (msg.kind_case()) {
      case v1::ServerMessage::kBatch: {
        absl::StatusOr<BatchLease> lease = Take(std::move(*msg.mutable_batch()));
        if (!lease.ok()) return Fail(Annotate(lease.status(), what));
        return std::optional<BatchLease>(std::move(*lease));
      }
      case v1::ServerMessage::kEpochEnd: epoch_ends_.push_back(msg.epoch_end()); continue;
      case v1::ServerMessage::kEnd:
        end_ = msg.end();
        finished_ = true;
        call_->End(/*cancel=*/false);
        return std::nullopt;
      default:
        return Fail(Annotate(ProtocolError(absl::StrCat("unexpected server message of kind ",
                                                        static_cast<int>(msg.kind_case()))),
                             what));
    }
  }
}

absl::StatusOr<BatchLease> Stream::Take(v1::Batch batch) {
  ASSIGN_OR_RETURN(const uint64_t bytes, ImageBytes(batch));
  const uint32_t n = batch.num_samples();
  if (static_cast<uint32_t>(batch.labels_size()) != n ||
      static_cast<uint32_t>(batch.sample_indices_size()) != n ||
      (!batch.shape().empty() && batch.shape(0) != n)) {
    return ProtocolError(absl::StrCat("batch ", batch.sequence(), " of ", n, " samples has ",
                                      batch.labels_size(), " labels, ", batch.sample_indices_size(),
                                      " indices"));
  }
  // The sample fields, checked before the slot is held or the images
  // touched (a refused batch leases nothing).
  ASSIGN_OR_RETURN(std::vector<Field> fields,
                   ParseFields(std::move(*batch.mutable_fields()), n, opened_.pipeline().fields(),
                               absl::StrCat("batch ", batch.sequence())));
  batch.clear_fields();
  const uint32_t slot = batch.slot();
  {
    MutexLock lock(&call_->mu);
    if (!call_->held.insert(slot).second) {
      return ProtocolError(absl::StrCat("batch ", batch.sequence(), " came in slot ", slot,
                                        ", which the client still holds"));
    }
  }
  BatchLease lease;
  // From here on the lease releases the slot if the batch turns out bad.
  lease.call_ = call_;
  lease.header_.set_slot(slot);
  lease.header_.set_sequence(batch.sequence());
  ASSIGN_OR_RETURN(lease.bytes_, call_->transport->View(batch, bytes));
  resume_ = batch.end_of_epoch() ? ResumeState{batch.epoch() + 1, 0, world_size_}
                                 : ResumeState{batch.epoch(), batch.offset(), world_size_};
  lease.header_ = std::move(batch);
  lease.fields_ = std::move(fields);
  return lease;
}

}  // namespace conveyor::client
