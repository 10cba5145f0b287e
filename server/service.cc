#include "server/service.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/batch_layout.h"
#include "core/sampler.h"
#include "core/stats.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.1f GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return absl::StrFormat("%.1f KiB", b / double(1ull << 10));
  return absl::StrFormat("%d B", b);
}

v1::DType ToProto(DType d) {
  switch (d) {
    case DType::kUint8:
      return v1::UINT8;
    case DType::kFloat32:
      return v1::FLOAT32;
    case DType::kFloat16:
      return v1::FLOAT16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

v1::Layout ToProto(Layout l) { return l == Layout::kNCHW ? v1::NCHW : v1::NHWC; }

void ToProto(const StageStats& s, v1::StageStats* out) {
  out->set_name(s.name);
  out->set_items_in(s.items_in);
  out->set_items_out(s.items_out);
  out->set_failures(s.failures);
  out->set_busy_ns(s.busy_ns);
  out->set_wait_input_ns(s.wait_input_ns);
  out->set_wait_output_ns(s.wait_output_ns);
  out->set_queue_size(s.queue_size);
  out->set_queue_capacity(s.queue_capacity);
  out->set_in_flight(s.in_flight);
}

}  // namespace

bool IsUnixPeer(const std::string& peer) { return absl::StartsWith(peer, "unix:"); }

// ---------------------------------------------------------------- Session

Session::~Session() {
  stream_->Cancel(absl::CancelledError("stream closed"));
  service_->Unregister(stream_->id(), reserved_bytes_);
}

// ---------------------------------------------------------------- Service

namespace {
std::map<std::string, std::shared_ptr<const PipelineConfig>> ByName(
    const std::vector<std::shared_ptr<const PipelineConfig>>& pipelines) {
  std::map<std::string, std::shared_ptr<const PipelineConfig>> m;
  for (const auto& p : pipelines) m.emplace(p->name, p);
  return m;
}
}  // namespace

ConveyorService::ConveyorService(const ServiceOptions& options,
                                 std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
                                 std::unique_ptr<Engine> engine)
    : options_(options),
      pipelines_(std::move(pipelines)),
      by_name_(ByName(pipelines_)),
      engine_(std::move(engine)) {}

ConveyorService::~ConveyorService() { engine_->Shutdown(); }

absl::StatusOr<std::unique_ptr<ConveyorService>> ConveyorService::Create(
    const ServiceOptions& options, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
    std::unique_ptr<Engine> engine) {
  if (engine == nullptr) return absl::InvalidArgumentError("no engine");
  if (pipelines.empty()) return absl::InvalidArgumentError("no pipelines");
  std::map<std::string, int> names;
  for (const auto& p : pipelines) {
    if (p == nullptr) return absl::InvalidArgumentError("null pipeline");
    if (absl::Status st = ValidatePipelineConfig(*p); !st.ok()) return st;
    if (++names[p->name] > 1) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate pipeline name ", p->name));
    }
  }
  if (options.max_streams == 0) return absl::InvalidArgumentError("max_streams must be positive");
  return std::unique_ptr<ConveyorService>(
      new ConveyorService(options, std::move(pipelines), std::move(engine)));
}

v1::PipelineInfo ConveyorService::Info(const PipelineConfig& p) const {
  v1::PipelineInfo info;
  info.set_name(p.name);
  info.set_dataset_size(p.dataset->size());
  info.set_num_classes(static_cast<uint32_t>(p.dataset->num_classes()));
  const TransformSpec& t = p.transform;
  if (t.layout == Layout::kNCHW) {
    info.add_sample_shape(3);
    info.add_sample_shape(t.output_height);
    info.add_sample_shape(t.output_width);
  } else {
    info.add_sample_shape(t.output_height);
    info.add_sample_shape(t.output_width);
    info.add_sample_shape(3);
  }
  info.set_dtype(ToProto(t.dtype));
  info.set_layout(ToProto(t.layout));
  info.set_max_batch_size(p.max_batch_size);
  info.set_augment(ToString(t.mode));
  info.set_error_policy(ToString(p.error_policy));
  return info;
}

v1::ListPipelinesResponse ConveyorService::ListPipelines() const {
  v1::ListPipelinesResponse r;
  for (const auto& p : pipelines_) *r.add_pipelines() = Info(*p);
  return r;
}

v1::GetStatsResponse ConveyorService::GetStats() const {
  const EngineStats es = engine_->Stats();
  v1::GetStatsResponse r;
  r.set_num_threads(static_cast<uint32_t>(es.num_threads));
  r.set_uptime_ns(es.uptime_ns);
  r.set_streams_open(es.streams_open);
  r.set_streams_total(es.streams_total);
  for (const StageStats& s : es.stages) ToProto(s, r.add_stages());
  r.set_bottleneck(ToString(Bottleneck(es.stages)));
  std::map<uint64_t, std::string> peers;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : sessions_) peers[id] = e.peer;
    r.set_slot_bytes_in_use(reserved_bytes_);
  }
  r.set_slot_bytes_budget(options_.memory_budget);
  for (const StreamStats& s : es.streams) {
    v1::StreamStats* o = r.add_streams();
    o->set_stream_id(s.stream_id);
    o->set_pipeline(s.pipeline);
    o->set_batches_emitted(s.batches_emitted);
    o->set_samples_emitted(s.samples_emitted);
    o->set_samples_failed(s.samples_failed);
    o->set_slots_total(s.slots_total);
    o->set_slots_held_by_client(s.slots_held_by_consumer);
    o->set_elapsed_ns(s.elapsed_ns);
    for (const StageStats& st : s.stages) ToProto(st, o->add_stages());
    if (auto it = peers.find(s.stream_id); it != peers.end()) o->set_peer(it->second);
  }
  return r;
}

absl::Status ConveyorService::BuildStreamOptions(const v1::OpenStream& req, const std::string& peer,
                                                 const PipelineConfig& p, StreamOptions* o,
                                                 v1::Transport* transport) const {
  if (req.credits() == 0 || req.credits() > kMaxCredits) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "credits must be within [1, %d] (batches the client may hold unreleased), got %d",
        kMaxCredits, req.credits()));
  }
  const uint32_t world = req.world_size() == 0 ? 1 : req.world_size();
  if (req.rank() >= world) {
    return absl::InvalidArgumentError(
        absl::StrFormat("rank %d must be below world_size %d", req.rank(), world));
  }
  if (req.num_epochs() > std::numeric_limits<uint64_t>::max() - req.first_epoch()) {
    return absl::InvalidArgumentError("first_epoch + num_epochs overflows");
  }

  const bool unix_peer = IsUnixPeer(peer);
  switch (req.transport()) {
    case v1::TRANSPORT_AUTO:
      if (unix_peer) {
        *transport = options_.fd_socket_path.empty() ? v1::INLINE : v1::SHARED_MEMORY;
      } else {
        *transport = req.accept_data_socket() && options_.data_server != nullptr ? v1::DATA_SOCKET
                                                                                  : v1::INLINE;
      }
      break;
    case v1::SHARED_MEMORY:
      if (!unix_peer) {
        return absl::FailedPreconditionError(absl::StrCat(
            "SHARED_MEMORY needs a connection over the daemon's unix socket; this one is ", peer,
            " (use INLINE or AUTO over TCP)"));
      }
      if (options_.fd_socket_path.empty()) {
        return absl::FailedPreconditionError("this daemon has no fd hand-over socket");
      }
      *transport = v1::SHARED_MEMORY;
      break;
    case v1::INLINE:
      *transport = v1::INLINE;
      break;
    case v1::DATA_SOCKET:
      if (unix_peer) {
        return absl::FailedPreconditionError(
            "DATA_SOCKET is for TCP connections; over the unix socket use SHARED_MEMORY or AUTO");
      }
      if (options_.data_server == nullptr) {
        return absl::FailedPreconditionError(
            "this daemon has no data socket (listen.data_tcp is none); use INLINE or AUTO");
      }
      *transport = v1::DATA_SOCKET;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown transport %d", static_cast<int>(req.transport())));
  }

  o->batch_size = req.batch_size();
  o->seed = req.seed();
  o->first_epoch = req.first_epoch();
  o->num_epochs = req.num_epochs();
  o->rank = req.rank();
  o->world_size = world;
  o->shuffle = req.has_shuffle() ? req.shuffle() : true;
  o->drop_last = req.drop_last();
  o->num_slots = req.credits();
  o->epoch_offset = 0;
  o->shareable_memory = *transport == v1::SHARED_MEMORY;

  if (req.has_resume()) {
    // The offset counts samples of the epoch's global order, whatever the
    // world size it was saved at: resuming at another world size (elastic)
    // deals the rest of the epoch out over the new ranks.
    const v1::ResumePosition& r = req.resume();
    const uint64_t last = o->num_epochs == 0 ? std::numeric_limits<uint64_t>::max()
                                             : o->first_epoch + o->num_epochs;  // exclusive
    if (r.epoch() < o->first_epoch || r.epoch() >= last) {
      return absl::OutOfRangeError(
          o->num_epochs == 0
              ? absl::StrFormat("resume epoch %d is before first_epoch %d", r.epoch(),
                                o->first_epoch)
              : absl::StrFormat("resume epoch %d is outside the stream's epochs [%d, %d)",
                                r.epoch(), o->first_epoch, last));
    }
    if (o->num_epochs != 0) o->num_epochs = last - r.epoch();
    o->first_epoch = r.epoch();
    o->epoch_offset = r.offset();
  }
  absl::Status st = ValidateStreamOptions(p, *o);
  if (absl::IsOutOfRange(st) && req.has_resume()) {
    return absl::OutOfRangeError(absl::StrFormat("resume offset %d of epoch %d: %s",
                                                 req.resume().offset(), req.resume().epoch(),
                                                 st.message()));
  }
  return st;
}

absl::StatusOr<std::unique_ptr<Session>> ConveyorService::OpenStream(const v1::OpenStream& req,
                                                                     const std::string& peer,
                                                                     std::function<void()> wake) {
  if (shutting_down()) return absl::UnavailableError("daemon shutting down");
  auto it = by_name_.find(req.pipeline());
  if (it == by_name_.end()) {
    std::vector<std::string> names;
    for (const auto& p : pipelines_) names.push_back(p->name);
    return absl::NotFoundError(absl::StrFormat("unknown pipeline '%s'; this daemon serves: %s",
                                               req.pipeline(), absl::StrJoin(names, ", ")));
  }
  const std::shared_ptr<const PipelineConfig>& pipeline = it->second;
  StreamOptions so;
  v1::Transport transport = v1::INLINE;
  if (absl::Status st = BuildStreamOptions(req, peer, *pipeline, &so, &transport); !st.ok()) {
    return st;
  }
  const BatchLayout layout = BatchLayout::For(pipeline->transform, so.batch_size);
  if (transport == v1::INLINE && layout.slot_bytes + (1u << 20) > options_.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "an INLINE batch of %s does not fit in one message (limit %s); lower batch_size or use "
        "SHARED_MEMORY over the unix socket",
        Bytes(layout.slot_bytes), Bytes(options_.max_message_bytes)));
  }

  // Reserve budget and a stream place before allocating anything.
  const uint64_t bytes = SlotArena::MappedBytes(so.num_slots, layout.slot_bytes);
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("daemon shutting down");
    if (reserved_streams_ >= options_.max_streams) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%d streams are open, the daemon's max_streams; retry when one ends", reserved_streams_));
    }
    if (bytes > options_.memory_budget - reserved_bytes_) {
      const uint64_t free_bytes = options_.memory_budget - reserved_bytes_;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "stream needs %s of slot memory (%d slots x %s) but only %s of the %s memory_budget is "
          "free (%d streams hold %s); lower credits or batch_size, retry later, or raise "
          "memory_budget",
          Bytes(bytes), so.num_slots, Bytes(bytes / so.num_slots), Bytes(free_bytes),
          Bytes(options_.memory_budget), reserved_streams_, Bytes(reserved_bytes_)));
    }
    reserved_bytes_ += bytes;
    ++reserved_streams_;
  }
  auto unreserve = [&] {
    absl::MutexLock lock(&mu_);
    reserved_bytes_ -= bytes;
    --reserved_streams_;
  };

  absl::StatusOr<std::unique_ptr<Stream>> opened = engine_->OpenStream(pipeline, so);
  if (!opened.ok()) {
    unreserve();
    return opened.status();
  }
  std::shared_ptr<Stream> stream(std::move(*opened));
  Entry entry;
  entry.stream = stream;
  entry.peer = peer;
  entry.handed_over = std::make_shared<std::atomic<bool>>(false);
  entry.wake = std::move(wake);
  // The client proves it owns the stream with this when it fetches the
  // memfd or connects the data socket.
  const bool needs_secret = transport == v1::SHARED_MEMORY || transport == v1::DATA_SOCKET;
  if (needs_secret) {
    if (absl::Status st = NewSecret(&entry.secret); !st.ok()) {
      unreserve();
      return st;
    }
  }
  if (transport == v1::SHARED_MEMORY) {
    entry.region_fd.Reset(fcntl(stream->arena().fd(), F_DUPFD_CLOEXEC, 0));
    if (!entry.region_fd) {
      unreserve();
      return absl::InternalError(absl::StrCat("dup of the region memfd: ", strerror(errno)));
    }
  }

  // From here on the session's destructor gives the reservation back.
  std::unique_ptr<Session> session(
      new Session(this, stream, transport, peer, bytes, entry.handed_over));
  v1::StreamOpened& op = session->opened_;
  op.set_stream_id(stream->id());
  op.set_transport(transport);
  if (needs_secret) op.set_secret(entry.secret.data(), entry.secret.size());
  if (transport == v1::SHARED_MEMORY) op.set_fd_socket(options_.fd_socket_path);
  if (transport == v1::DATA_SOCKET) {
    op.set_data_port(static_cast<uint32_t>(options_.data_server->port()));
    // A failed connection ends the stream with its reason; the reactor then
    // finishes the call with it.
    session->data_channel_ = options_.data_server->Open(
        stream->id(), entry.secret, [weak = std::weak_ptr<Stream>(stream)](absl::Status why) {
          if (auto s = weak.lock()) s->Cancel(std::move(why));
        });
  }
  op.set_region_bytes(stream->arena().total_bytes());
  op.set_slot_bytes(stream->arena().slot_bytes());
  op.set_num_slots(static_cast<uint32_t>(stream->arena().num_slots()));
  op.set_samples_per_epoch(stream->samples_per_epoch());
  op.set_batches_per_epoch((stream->samples_per_epoch() + so.batch_size - 1) / so.batch_size);
  *op.mutable_pipeline() = Info(*pipeline);

  {
    absl::MutexLock lock(&mu_);
    // BeginShutdown may have run since the reservation; it could not see
    // this stream, so refuse it here.
    if (shutting_down_) return absl::UnavailableError("daemon shutting down");
    sessions_.emplace(stream->id(), std::move(entry));
  }
  return session;
}

absl::StatusOr<UniqueFd> ConveyorService::RegionFd(uint64_t stream_id, const Secret& secret) {
  UniqueFd fd;
  std::function<void()> wake;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(stream_id);
    // Compare against something either way so that an unknown id costs the same.
    static const Secret kNone{};
    const bool known = it != sessions_.end() && it->second.region_fd.valid();
    const bool match = ConstantTimeEqual(known ? it->second.secret : kNone, secret);
    if (!known || !match) return absl::PermissionDeniedError("unknown stream or wrong secret");
    fd.Reset(fcntl(it->second.region_fd.get(), F_DUPFD_CLOEXEC, 0));
    if (!fd) return absl::InternalError(absl::StrCat("dup: ", strerror(errno)));
    it->second.handed_over->store(true, std::memory_order_release);
    wake = it->second.wake;
  }
  if (wake) wake();
  return fd;
}

void ConveyorService::Unregister(uint64_t stream_id, uint64_t reserved_bytes) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(stream_id);  // closes the duplicate region fd
  reserved_bytes_ -= reserved_bytes;
  --reserved_streams_;
}

void ConveyorService::BeginShutdown() {
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<std::function<void()>> wakes;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    shutting_down_ = true;
    for (auto& [id, e] : sessions_) {
      if (auto s = e.stream.lock()) streams.push_back(std::move(s));
      if (e.wake) wakes.push_back(e.wake);
    }
  }
  if (!streams.empty()) spdlog::info("shutting down: cancelling {} open stream(s)", streams.size());
  // Outside the lock: Cancel runs the streams' ready callbacks.
  for (auto& s : streams) s->Cancel(absl::UnavailableError("daemon shutting down"));
  // Streams that already ended may be waiting for their hand-over.
  for (auto& w : wakes) w();
}

bool ConveyorService::shutting_down() const {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

}  // namespace conveyor::server
