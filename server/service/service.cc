#include "server/service/service.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/base/status_macros.h"
#include "core/base/text_escape.h"
#include "core/engine/stats.h"
#include "server/service/batch_message.h"
#include "server/service/remote_host_stats.h"
#include "server/service/stream_choices_request.h"
#include "spdlog/spdlog.h"

namespace conveyor::server {

namespace {

std::string Bytes(uint64_t b) {
  if (b >= (1ull << 30)) return absl::StrFormat("%.1f GiB", b / double(1ull << 30));
  if (b >= (1ull << 20)) return absl::StrFormat("%.1f MiB", b / double(1ull << 20));
  if (b >= (1ull << 10)) return absl::StrFormat("%.1f KiB", b / double(1ull << 10));
  return absl::StrFormat("%d B", b);
}

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
  for (size_t c = 0; c < s.failures_by_code.size(); ++c) {
    if (s.failures_by_code[c] == 0) continue;
    (*out->mutable_failures_by_reason())[absl::AsciiStrToLower(
        absl::StatusCodeToString(static_cast<absl::StatusCode>(c)))] = s.failures_by_code[c];
  }
}

}  // namespace

// ---------------------------------------------------------------- Session

Session::~Session() {
  stream_->Cancel(absl::CancelledError("stream closed"));
  transport_.reset();  // leaves the transport's registries (fd hand-over, data socket)
  service_->Unregister(stream_->id(), client_.LimitKey(), reserved_credits_, reserved_bytes_);
}

// ---------------------------------------------------------------- Service

namespace {
std::vector<std::string> Names(const std::vector<std::shared_ptr<const PipelineConfig>>& ps) {
  std::vector<std::string> names;
  for (const auto& p : ps) names.push_back(p->name);
  return names;
}
}  // namespace

ConveyorService::ConveyorService(const ServiceOptions& options,
                                 std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
                                 std::unique_ptr<Engine> engine,
                                 std::unique_ptr<TransportSet> transports)
    : options_(options),
      engine_(std::move(engine)),
      transports_(std::move(transports)),
      deliveries_(std::make_unique<DeliveryCounters>(Names(pipelines))),
      pipelines_(std::move(pipelines)) {}

ConveyorService::~ConveyorService() {
  StopWatchdog();
  engine_->Shutdown();
}

void ConveyorService::StopWatchdog() {
  {
    MutexLock lock(&mu_);
    stop_watchdog_ = true;
  }
  watchdog_cv_.SignalAll();
  if (watchdog_.joinable()) watchdog_.join();
}

void ConveyorService::WatchIdleStreams() {
  const std::chrono::milliseconds timeout = options_.stream_idle_timeout;
  const auto interval = std::clamp<std::chrono::milliseconds>(
      timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  struct Cancel {
    std::shared_ptr<Stream> stream;
    std::string message;
    std::string client;
  };
  while (true) {
    std::vector<std::pair<uint64_t, std::shared_ptr<Stream>>> open;
    {
      MutexLock lock(&mu_);
      if (!stop_watchdog_) {
        watchdog_cv_.WaitWithDeadline(&mu_, absl::Now() + absl::FromChrono(interval));
      }
      if (stop_watchdog_) return;
      for (const auto& [id, e] : sessions_) {
        if (auto s = e.stream.lock()) open.emplace_back(id, std::move(s));
      }
    }
    // Outside the lock: Stats takes the stream's own.
    std::vector<StreamStats> figures;
    figures.reserve(open.size());
    for (const auto& [id, s] : open) figures.push_back(s->Stats());
    std::vector<Cancel> cancels;
    std::vector<std::pair<uint64_t, std::function<void()>>> aborts;
    {
      MutexLock lock(&mu_);
      const Clock::time_point now = Clock::now();
      for (size_t i = 0; i < open.size() && !shutting_down_; ++i) {
        auto it = sessions_.find(open[i].first);
        if (it == sessions_.end()) continue;
        Entry& e = it->second;
        const StreamStats& f = figures[i];
        if (e.idle_ended_at) {
          if (!e.aborted && e.abort && now - *e.idle_ended_at >= options_.handover_grace) {
            e.aborted = true;
            aborts.emplace_back(it->first, e.abort);
          }
          continue;
        }
        if (f.slots_held_by_consumer == 0 || f.batches_emitted != e.seen_batches ||
            f.slots_held_by_consumer != e.seen_held) {
          e.seen_batches = f.batches_emitted;
          e.seen_held = f.slots_held_by_consumer;
          e.progress_at = now;
          continue;
        }
        const double idle_s = std::chrono::duration<double>(now - e.progress_at).count();
        if (now - e.progress_at < timeout) continue;
        e.idle_ended_at = now;
        cancels.push_back(Cancel{
            open[i].second,
            absl::StrFormat("stream %d ended: its client held %d of its %d slots and released "
                            "none for %.1f s while the stream could not go on "
                            "(stream_idle_timeout_seconds is %g); its slots and memory are "
                            "given back",
                            it->first, f.slots_held_by_consumer, f.slots_total, idle_s,
                            timeout.count() / 1000.0),
            e.client.Describe()});
      }
    }
    // Outside the lock: Cancel runs the stream's ready callback.
    for (Cancel& c : cancels) {
      spdlog::warn("{} (client {})", c.message, c.client);
      c.stream->Cancel(absl::DeadlineExceededError(c.message));
    }
    for (auto& [id, abort] : aborts) {
      spdlog::warn(
          "stream {}: its client still reads nothing after the idle timeout; call "
          "cancelled",
          id);
      abort();
    }
  }
}

absl::StatusOr<std::unique_ptr<ConveyorService>> ConveyorService::Create(
    const ServiceOptions& options, std::vector<std::shared_ptr<const PipelineConfig>> pipelines,
    std::unique_ptr<Engine> engine, std::unique_ptr<TransportSet> transports) {
  if (engine == nullptr) return absl::InvalidArgumentError("no engine");
  if (transports == nullptr) return absl::InvalidArgumentError("no transports");
  RETURN_IF_ERROR(PipelineRegistry::Validate(pipelines));
  if (options.max_streams == 0) return absl::InvalidArgumentError("max_streams must be positive");
  std::unique_ptr<ConveyorService> service(
      new ConveyorService(options, std::move(pipelines), std::move(engine), std::move(transports)));
  if (options.stream_idle_timeout.count() > 0) {
    ConveyorService* s = service.get();
    service->watchdog_ = std::thread([s] { s->WatchIdleStreams(); });
  }
  return service;
}

v1::ListPipelinesResponse ConveyorService::ListPipelines() const {
  v1::ListPipelinesResponse r;
  for (const auto& p : pipelines_.List()) *r.add_pipelines() = PipelineInfoOf(*p);
  return r;
}

absl::Status ConveyorService::ReplacePipelines(PipelineList pipelines) {
  RETURN_IF_ERROR(PipelineRegistry::Validate(pipelines));
  deliveries_->AddPipelines(Names(pipelines));
  pipelines_.Replace(std::move(pipelines));
  return absl::OkStatus();
}

v1::GetStatsResponse ConveyorService::GetStats() const {
  ClientIdentity daemon;
  daemon.is_operator = true;
  return GetStats(daemon);
}

absl::Status ConveyorService::CheckStreamOwner(uint64_t stream_id,
                                               const PeerCredentials& peer) const {
  MutexLock lock(&mu_);
  auto it = sessions_.find(stream_id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrFormat("no open stream %d", stream_id));
  }
  const std::optional<PeerCredentials>& owner = it->second.client.credentials;
  if (!owner || owner->uid != peer.uid) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "stream %d was not opened by uid %d (pid %d); its memory goes only to its owner", stream_id,
        peer.uid, peer.pid));
  }
  return absl::OkStatus();
}

v1::GetStatsResponse ConveyorService::GetStats(const ClientIdentity& viewer) const {
  const EngineStats es = engine_->Stats();
  v1::GetStatsResponse r;
  r.set_num_threads(static_cast<uint32_t>(es.num_threads));
  r.set_uptime_ns(es.uptime_ns);
  r.set_streams_total(es.streams_total);
  for (const StageStats& s : es.stages) ToProto(s, r.add_stages());
  if (std::optional<Stage> b = BottleneckUnderLoad(es.streams)) r.set_bottleneck(ToString(*b));
  struct Owner {
    std::string described;
    bool visible = false;
  };
  std::map<uint64_t, Owner> peers;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, e] : sessions_) {
      peers[id] = Owner{e.client.Describe(), viewer.SeesStreamsOf(e.client)};
    }
    r.set_slot_bytes_in_use(reserved_bytes_);
  }
  // A stream counts from its open until both the service (its session,
  // which holds its max_streams place) and the engine (its work) let it go:
  // closing one frees the engine first and the session when the call ends,
  // so neither count alone says when a place is free again.
  std::set<uint64_t> open_ids;
  for (const auto& [id, peer] : peers) open_ids.insert(id);
  for (const StreamStats& s : es.streams) open_ids.insert(s.stream_id);
  r.set_streams_open(open_ids.size());
  r.set_slot_bytes_budget(options_.memory_budget);
  deliveries_->AppendTo(&r);
  refusals_.AppendTo(&r);
  AppendRemoteHostStats(pipelines_.List(), &r);
  for (const std::shared_ptr<const PipelineConfig>& p : pipelines_.List()) {
    if (p->output_cache == nullptr) continue;
    const OutputCache::Stats cs = p->output_cache->GetStats();
    v1::OutputCacheStats* o = r.add_output_caches();
    o->set_pipeline(p->name);
    o->set_hits(cs.hits);
    o->set_misses(cs.misses);
    o->set_inserts(cs.inserts);
    o->set_evictions(cs.evictions);
    o->set_entries(cs.entries);
    o->set_bytes(cs.bytes);
    o->set_capacity_bytes(cs.capacity_bytes);
  }
  SetObjectCacheStats(pipelines_.List(), &r);
  reloads_->AppendTo(&r);
  for (const StreamStats& s : es.streams) {
    // A stream whose session is gone (closing) has no known owner: only
    // operators see it.
    auto owner = peers.find(s.stream_id);
    const bool visible = owner != peers.end() ? owner->second.visible : viewer.is_operator;
    if (!visible) continue;
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
    if (owner != peers.end()) o->set_peer(owner->second.described);
    o->set_fetches_pending(s.fetches_pending);
    o->set_output_cache_hits(s.output_cache_hits);
    o->set_output_cache_misses(s.output_cache_misses);
    v1::StreamLimits* limits = o->mutable_limits();
    limits->set_fetch_concurrency(s.autotune.fetch_concurrency);
    limits->set_decode_concurrency(s.autotune.decode_concurrency);
    limits->set_fetch_queue_capacity(s.autotune.fetch_queue_capacity);
    limits->set_autotune(s.autotune.enabled);
    limits->set_autotune_changes(s.autotune.changes);
    limits->set_autotune_reason(s.autotune.reason);
    if (s.oldest_fetch.has_value()) {
      v1::PendingFetch* f = o->mutable_oldest_fetch();
      f->set_sample_index(s.oldest_fetch->sample_index);
      f->set_object(s.oldest_fetch->object);  // redacted by the reader
      f->set_host(s.oldest_fetch->host);
      f->set_bytes_received(s.oldest_fetch->bytes_received);
      f->set_age_ns(s.oldest_fetch->age_ns);
    }
  }
  return r;
}

absl::StatusOr<StreamPlan> ConveyorService::PlanRequest(const v1::OpenStream& req,
                                                        const ClientIdentity& client,
                                                        const PipelineConfig& p,
                                                        Transport** transport) const {
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

  ASSIGN_OR_RETURN(*transport, transports_->Choose(req, client));

  StreamOptions o;
  o.batch_size = req.batch_size();
  o.seed = req.seed();
  o.first_epoch = req.first_epoch();
  o.num_epochs = req.num_epochs();
  o.rank = req.rank();
  o.world_size = world;
  o.shuffle = req.has_shuffle() ? req.shuffle() : true;
  o.drop_last = req.drop_last();
  o.num_slots = req.credits();
  o.epoch_offset = 0;
  o.max_batches = req.max_batches();
  o.memory = (*transport)->slot_memory();
  // Audio samples are float32 only: a transport that converts on the
  // device copies them as they are.
  o.collate_uint8 = (*transport)->collate_uint8() && p.transform.kind != MediaKind::kAudio;
  ASSIGN_OR_RETURN(o.finisher, (*transport)->MakeFinisher(req, p));
  // Fair sharing: the client's streams share one group of the scheduler,
  // weighted by its token's weight or per_client.weight.
  o.client = client.LimitKey();
  o.weight = client.weight > 0 ? client.weight : options_.per_client.weight;
  // The offset counts samples of the epoch's global order, whatever the
  // world size it was saved at: resuming at another world size (elastic)
  // deals the rest of the epoch out over the new ranks.
  std::optional<ResumePosition> resume;
  if (req.has_resume()) resume = ResumePosition{req.resume().epoch(), req.resume().offset()};
  return PlanStream(p, o, resume);
}

absl::StatusOr<std::unique_ptr<Session>> ConveyorService::OpenStream(const v1::OpenStream& req,
                                                                     const ClientIdentity& client,
                                                                     std::function<void()> wake,
                                                                     std::function<void()> abort) {
  if (shutting_down()) return absl::UnavailableError("daemon shutting down");
  // The definition this stream keeps for its life, whatever reloads come.
  ASSIGN_OR_RETURN(std::shared_ptr<const PipelineConfig> defined, pipelines_.Find(req.pipeline()));
  if (!client.MayOpen(req.pipeline())) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s may not open pipeline '%s'", client.Describe(),
                        EscapeText(req.pipeline(), kClientStringCap)));
  }
  ASSIGN_OR_RETURN(const StreamChoices choices, StreamChoicesOf(req));
  // The stream's own size, dtype and fields, within the pipeline's bounds:
  // from here on the stream runs on that view of its pipeline.
  ASSIGN_OR_RETURN(const std::shared_ptr<const PipelineConfig> pipeline,
                   PipelineForStream(std::move(defined), choices));
  Transport* transport = nullptr;
  ASSIGN_OR_RETURN(StreamPlan plan, PlanRequest(req, client, *pipeline, &transport));
  RETURN_IF_ERROR(transport->CheckLayout(plan.layout));
  const StreamOptions& so = plan.options;

  // Reserve budget and a stream place before allocating anything.
  const uint64_t bytes = plan.arena_bytes;
  const std::string client_key = client.LimitKey();
  {
    MutexLock lock(&mu_);
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
          Bytes(bytes), so.num_slots, Bytes(plan.slot_bytes), Bytes(free_bytes),
          Bytes(options_.memory_budget), reserved_streams_, Bytes(reserved_bytes_)));
    }
    // The client's own share: checked last, so that the daemon-wide
    // message wins when both apply.
    RETURN_IF_ERROR(per_client_.Reserve(client_key, so.num_slots, bytes, options_.per_client));
    reserved_bytes_ += bytes;
    ++reserved_streams_;
  }
  auto unreserve = [&] {
    MutexLock lock(&mu_);
    reserved_bytes_ -= bytes;
    --reserved_streams_;
    per_client_.Release(client_key, so.num_slots, bytes);
  };

  absl::StatusOr<std::unique_ptr<Stream>> opened = engine_->OpenStream(pipeline, plan);
  if (!opened.ok()) {
    unreserve();
    return opened.status();
  }
  std::shared_ptr<Stream> stream(std::move(*opened));
  // From here on the session's destructor gives the reservation back.
  std::unique_ptr<Session> session(new Session(this, stream, client, bytes, so.num_slots));
  absl::StatusOr<std::unique_ptr<StreamTransport>> stream_transport = transport->Open(stream, wake);
  if (!stream_transport.ok()) return stream_transport.status();
  session->transport_ = *std::move(stream_transport);
  session->delivered_ = deliveries_->Find(pipeline->name, transport->kind());
  session->data_wait_ = deliveries_->FindWait(pipeline->name);

  v1::StreamOpened& op = session->opened_;
  op.set_stream_id(stream->id());
  op.set_transport(transport->kind());
  op.set_samples_per_epoch(plan.samples_per_epoch);
  op.set_batches_per_epoch(plan.batches_per_epoch);
  *op.mutable_pipeline() = PipelineInfoOf(*pipeline);
  session->transport_->DescribeIn(&op);

  {
    MutexLock lock(&mu_);
    // BeginShutdown may have run since the reservation; it could not see
    // this stream, so refuse it here.
    if (shutting_down_) return absl::UnavailableError("daemon shutting down");
    Entry& e = sessions_[stream->id()];
    e.stream = stream;
    e.client = client;
    e.wake = std::move(wake);
    e.abort = std::move(abort);
  }
  return session;
}

void ConveyorService::Unregister(uint64_t stream_id, const std::string& client_key,
                                 uint32_t credits, uint64_t reserved_bytes) {
  MutexLock lock(&mu_);
  per_client_.Release(client_key, credits, reserved_bytes);
  sessions_.erase(stream_id);  // closes the duplicate region fd
  reserved_bytes_ -= reserved_bytes;
  --reserved_streams_;
}

void ConveyorService::BeginShutdown() {
  std::vector<std::shared_ptr<Stream>> streams;
  std::vector<std::function<void()>> wakes;
  {
    MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  return shutting_down_;
}

}  // namespace conveyor::server
