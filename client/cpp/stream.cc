#include "client/cpp/stream.h"

#include <grpcpp/grpcpp.h>

#include <map>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "client/cpp/mapped_region.h"
#include "client/cpp/side_socket.h"
#include "core/base/mutex.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/base/unique_fd.h"

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

  // Constant once the stream is open (the batches' memory).
  MappedRegion region;   // SHARED_MEMORY
  UniqueFd data_socket;  // DATA_SOCKET
  // DATA_SOCKET: one buffer per slot, read into only by the Stream's thread
  // and only while the slot is not held.
  std::map<uint32_t, std::vector<uint8_t>> slot_buffers;

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

absl::Status ProtocolError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("protocol error: ", what));
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

size_t DTypeBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::UINT8: return 1;
    case v1::FLOAT16: return 2;
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
    inline_images_ = std::move(other.inline_images_);
    images_ = std::exchange(other.images_, nullptr);
  }
  return *this;
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
  open.set_transport(options.transport);
  open.set_accept_data_socket(data_host.has_value());
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
  switch (op.transport()) {
    case v1::SHARED_MEMORY: {
      const v1::SharedMemoryOpened& shm = op.shared_memory();
      absl::StatusOr<UniqueFd> fd =
          ReceiveRegionFd(shm.fd_socket(), op.stream_id(), shm.secret(), options.side_timeout);
      if (!fd.ok()) return Annotate(fd.status(), what);
      absl::StatusOr<MappedRegion> region = MappedRegion::Map(fd->get(), shm.region_bytes());
      if (!region.ok()) return Annotate(region.status(), what);
      call->region = std::move(*region);  // the fd closes here; the mapping stays
      break;
    }
    case v1::DATA_SOCKET: {
      if (!data_host) {
        return Annotate(ProtocolError("the daemon chose DATA_SOCKET on a unix socket"), what);
      }
      absl::StatusOr<UniqueFd> sock = ConnectDataSocket(
          *data_host, op.data_socket().data_port(), op.stream_id(), op.data_socket().secret(),
          options.side_timeout, options.data_read_timeout);
      if (!sock.ok()) return Annotate(sock.status(), what);
      call->data_socket = std::move(*sock);
      break;
    }
    case v1::INLINE: break;
    default:
      return Annotate(ProtocolError(absl::StrCat("the daemon chose transport ",
                                                 static_cast<int>(op.transport()))),
                      what);
  }
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
  const bool inline_bytes = opened_.transport() == v1::INLINE;
  if (!inline_bytes && batch.images_bytes() != bytes) {
    return ProtocolError(absl::StrCat("batch ", batch.sequence(), ": images_bytes ",
                                      batch.images_bytes(), " does not match its shape and dtype (",
                                      bytes, " bytes)"));
  }
  switch (opened_.transport()) {
    case v1::SHARED_MEMORY:
      if (bytes > 0) {
        ASSIGN_OR_RETURN(lease.images_, call_->region.Bytes(batch.images_offset(), bytes));
      }
      break;
    case v1::DATA_SOCKET: {
      std::vector<uint8_t>& buffer = call_->slot_buffers[slot];
      buffer.resize(bytes);
      RETURN_IF_ERROR(ReadFull(call_->data_socket.get(), buffer.data(), bytes, "data socket"));
      lease.images_ = buffer.data();
      break;
    }
    default:  // INLINE
      if (batch.images().size() != bytes) {
        return ProtocolError(absl::StrCat("batch ", batch.sequence(), ": ", batch.images().size(),
                                          " inline bytes do not match its shape and dtype (", bytes,
                                          " bytes)"));
      }
      lease.inline_images_ = std::make_unique<std::string>(std::move(*batch.mutable_images()));
      batch.clear_images();
      batch.set_images_bytes(bytes);
      lease.images_ = reinterpret_cast<const uint8_t*>(lease.inline_images_->data());
      break;
  }
  resume_ = batch.end_of_epoch() ? ResumeState{batch.epoch() + 1, 0, world_size_}
                                 : ResumeState{batch.epoch(), batch.offset(), world_size_};
  lease.header_ = std::move(batch);
  return lease;
}

}  // namespace conveyor::client
