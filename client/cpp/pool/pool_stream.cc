#include "client/cpp/pool/pool_stream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cpp/pool/pool_plan.h"
#include "core/base/mutex.h"
#include "core/base/status_macros.h"

namespace conveyor::client {
namespace internal {
namespace {

constexpr double kStarvedRecentlyS = 2.0;  // local_first: remote daemons help this long
constexpr double kBackoffFirstS = 0.5;
constexpr double kBackoffMaxS = 10.0;
constexpr absl::Duration kCheckTimeout = absl::Seconds(5);  // ListPipelines on (re)connect

double NowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t ToNs(double s) { return static_cast<uint64_t>(s * 1e9); }

// What a failed range says of its daemon.
enum class Failure { kData, kRefuse, kRetry };

Failure Classify(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kDataLoss: return Failure::kData;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated: return Failure::kRefuse;
    default: return Failure::kRetry;
  }
}

struct RangeOrder {
  bool operator()(const BatchRange& a, const BatchRange& b) const { return a.g > b.g; }
};

}  // namespace

struct Worker;

// A range being read from one daemon.
struct Job {
  Worker* worker = nullptr;
  BatchRange range;
  std::shared_ptr<StreamCanceller> canceller = std::make_shared<StreamCanceller>();
  uint64_t received = 0;
  uint64_t handed = 0;
  bool finished = false;   // all its batches received (or a data error ended it)
  bool abandoned = false;  // its rest went to other daemons
  double progress = 0;     // when it last delivered a batch (or was taken)
  bool over() const { return finished || abandoned; }
};

// One daemon and the thread that reads its ranges.
struct Worker {
  PoolEndpoint endpoint;
  // Connected and checked, shared by the worker's threads (a copy each
  // per range: a Client is a handle on one channel); dropped at the next
  // range when `reconnect` says so (after a failure).
  Mutex connect_mu;
  std::optional<Client> client ABSL_GUARDED_BY(connect_mu);
  bool reconnect = false;
  std::vector<std::shared_ptr<Job>> jobs;  // ranges with batches not handed out
  uint32_t failures = 0;
  double usable_at = 0;
  std::string state = "connecting";
  std::string last_error;
  std::string refused;
  bool retired = false;
  uint64_t ranges = 0, batches = 0;
  std::vector<std::thread> threads;
};

struct PoolState {
  // Fixed at Open.
  std::unique_ptr<PoolServers> servers;
  StreamOptions request;
  PoolOptions options;
  ClientOptions client_options;
  v1::PipelineInfo pipeline;

  Mutex mu;
  CondVar cv;
  std::optional<RangePlan> plan ABSL_GUARDED_BY(mu);
  std::optional<BatchRange> fresh ABSL_GUARDED_BY(mu);
  std::priority_queue<BatchRange, std::vector<BatchRange>, RangeOrder> pending ABSL_GUARDED_BY(mu);
  std::map<uint64_t, std::pair<BatchLease, std::shared_ptr<Job>>> ready ABSL_GUARDED_BY(mu);
  std::map<uint64_t, absl::Status> errors ABSL_GUARDED_BY(mu);
  std::map<std::string, std::unique_ptr<Worker>> workers ABSL_GUARDED_BY(mu);
  std::vector<std::unique_ptr<Worker>> gone ABSL_GUARDED_BY(mu);  // replaced: joined at Close
  std::map<std::string, std::string> refused ABSL_GUARDED_BY(mu);
  uint64_t next ABSL_GUARDED_BY(mu) = 0;
  bool waiting ABSL_GUARDED_BY(mu) = false;
  double last_wait_end ABSL_GUARDED_BY(mu) = 0;
  double last_batch_at ABSL_GUARDED_BY(mu) = 0;
  double starved_seconds ABSL_GUARDED_BY(mu) = 0;
  uint64_t requeued ABSL_GUARDED_BY(mu) = 0;
  bool closed ABSL_GUARDED_BY(mu) = false;
  std::thread resolver;

  void AddWorker(const PoolEndpoint& ep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Run(Worker* w);
  void Serve(Worker* w, const std::shared_ptr<Job>& job);
  absl::StatusOr<Client> Connect(Worker* w);
  void Failed(Worker* w, const std::shared_ptr<Job>& job, const absl::Status& s);
  void Abandon(const std::shared_ptr<Job>& job, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Forget(const std::shared_ptr<Job>& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::optional<BatchRange> Claimable(Worker* w, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool LocalUsable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void CheckStalls(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  std::string Describe() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void ResolveLoop();
};

void PoolState::AddWorker(const PoolEndpoint& ep) {
  auto w = std::make_unique<Worker>();
  w->endpoint = ep;
  Worker* raw = w.get();
  auto it = workers.find(ep.address);
  if (it != workers.end()) gone.push_back(std::move(it->second));
  workers[ep.address] = std::move(w);
  for (uint32_t lane = 0; lane < options.streams_per_daemon; ++lane) {
    raw->threads.emplace_back([this, raw] { Run(raw); });
  }
}

bool PoolState::LocalUsable() const {
  for (const auto& [addr, w] : workers) {
    if (w->endpoint.entry == 0 && (w->state == "ready" || w->state == "connecting")) return true;
  }
  return false;
}

std::optional<BatchRange> PoolState::Claimable(Worker* w, double now) {
  if (w->retired || !w->refused.empty() || now < w->usable_at) return std::nullopt;
  std::optional<BatchRange> r;
  if (!pending.empty()) {
    r = pending.top();
  } else {
    r = fresh;
  }
  if (!r.has_value()) return std::nullopt;
  if (w->jobs.size() >= options.ranges_ahead) {
    for (const auto& j : w->jobs) {
      if (j->range.g <= r->g) return std::nullopt;  // only a range before all it holds
    }
  }
  if (options.policy == PoolPolicy::kLocalFirst && w->endpoint.entry != 0) {
    const bool starved = waiting || now - last_wait_end <= kStarvedRecentlyS;
    if (!starved && LocalUsable()) return std::nullopt;
  }
  return r;
}

void PoolState::Run(Worker* w) {
  while (true) {
    std::shared_ptr<Job> job;
    {
      MutexLock lock(&mu);
      std::optional<BatchRange> r;
      while (!closed && w->refused.empty() && !w->retired) {
        const double now = NowS();
        r = Claimable(w, now);
        if (r.has_value()) break;
        const double wait = now >= w->usable_at ? 0.1 : std::min(w->usable_at - now, 0.5);
        cv.WaitUntilMonotonic(&mu, ToNs(now + wait));
      }
      if (!r.has_value() || closed || !w->refused.empty() || w->retired) return;
      if (!pending.empty() && pending.top().g == r->g) {
        pending.pop();
      } else {
        fresh = plan->Next();
      }
      job = std::make_shared<Job>();
      job->worker = w;
      job->range = *r;
      job->progress = NowS();
      w->jobs.push_back(job);
    }
    Serve(w, job);
  }
}

absl::StatusOr<Client> PoolState::Connect(Worker* w) {
  ASSIGN_OR_RETURN(Client c, Client::Create(w->endpoint.address, client_options));
  ASSIGN_OR_RETURN(std::vector<v1::PipelineInfo> infos, c.ListPipelines(kCheckTimeout));
  const v1::PipelineInfo* info = nullptr;
  for (const auto& p : infos) {
    if (p.name() == request.pipeline) info = &p;
  }
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(w->endpoint.address, " has no pipeline \"", request.pipeline, "\""));
  }
  if (std::optional<std::string> diff = FingerprintDifference(pipeline, *info)) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline \"", request.pipeline, "\" on ",
                                                   w->endpoint.address,
                                                   " differs from the first daemon's in ", *diff));
  }
  return c;
}

void PoolState::Serve(Worker* w, const std::shared_ptr<Job>& job) {
  const BatchRange r = job->range;
  uint64_t epochs_left = 0;
  bool reconnect = false;
  {
    MutexLock lock(&mu);
    reconnect = w->reconnect;
    w->reconnect = false;
    epochs_left = plan->epochs_left(r.epoch);
  }
  std::optional<Client> client;
  absl::Status connected;
  {
    MutexLock lock(&w->connect_mu);  // one (re)connection at a time
    if (reconnect) w->client.reset();
    if (!w->client.has_value()) {
      absl::StatusOr<Client> c = Connect(w);
      if (c.ok()) {
        w->client.emplace(*std::move(c));
      } else {
        connected = c.status();
      }
    }
    if (connected.ok()) client = w->client;
  }
  if (!connected.ok()) return Failed(w, job, connected);
  {
    MutexLock lock(&mu);
    if (w->state != "refused") w->state = "ready";
  }
  StreamOptions o = request;
  o.first_epoch = r.epoch;
  o.num_epochs = epochs_left;
  o.credits = static_cast<uint32_t>(r.count);
  o.max_batches = r.count;
  o.resume.reset();
  if (r.offset != 0) o.resume = ResumeState{r.epoch, r.offset, request.world_size};
  o.canceller = job->canceller;
  // A stalled daemon's data socket must not hold the worker longer than a stall.
  o.data_read_timeout = std::min(o.data_read_timeout, options.stall_timeout);
  absl::StatusOr<std::unique_ptr<Stream>> stream = client->OpenStream(o);
  if (!stream.ok()) return Failed(w, job, stream.status());
  {
    MutexLock lock(&mu);
    job->progress = NowS();
    if (job->abandoned) {
      Forget(job);
      return;
    }
  }
  for (uint64_t i = 0; i < r.count; ++i) {
    absl::StatusOr<std::optional<BatchLease>> next = (*stream)->Next();
    if (!next.ok()) return Failed(w, job, next.status());
    if (!next->has_value()) {
      return Failed(w, job,
                    absl::UnavailableError(absl::StrCat(w->endpoint.address,
                                                        " ended the range's stream after ", i,
                                                        " of ", r.count, " batches")));
    }
    BatchLease lease = std::move(**next);
    v1::Batch& h = lease.header_;
    if (h.epoch() == r.epoch) {
      // Counted from the range's start by its stream; from the epoch's
      // start (or the pool's resume point) here. Later epochs agree.
      h.set_batch_in_epoch(r.first + i);
      h.set_position(r.position0 + h.position());
      h.set_epoch_samples(r.epoch_samples);
    }
    MutexLock lock(&mu);
    if (job->abandoned) return;
    ready.emplace(r.g + i, std::make_pair(std::move(lease), job));
    ++job->received;
    ++w->batches;
    job->progress = last_batch_at = NowS();
    cv.SignalAll();
  }
  MutexLock lock(&mu);
  job->finished = true;
  ++w->ranges;
  w->failures = 0;
  Forget(job);
  cv.SignalAll();
}

void PoolState::Failed(Worker* w, const std::shared_ptr<Job>& job, const absl::Status& s) {
  MutexLock lock(&mu);
  if (job->abandoned || closed) {
    Forget(job);
    return;
  }
  switch (Classify(s)) {
    case Failure::kData:
      errors[job->range.g + job->received] = s;
      job->finished = true;
      Forget(job);
      break;
    case Failure::kRefuse:
      w->refused = std::string(s.message());
      w->state = "refused";
      refused[w->endpoint.address] = w->refused;
      Abandon(job, w->refused);
      break;
    case Failure::kRetry: Abandon(job, std::string(s.message())); break;
  }
  cv.SignalAll();
}

void PoolState::Abandon(const std::shared_ptr<Job>& job, const std::string& why) {
  Worker* w = job->worker;
  job->abandoned = true;
  if (job->received < job->range.count) {
    pending.push(plan->RangeAt(job->range.g + job->received, job->range.count - job->received));
    ++requeued;
  }
  ++w->failures;
  w->usable_at = NowS() + std::min(kBackoffFirstS * std::pow(2.0, w->failures - 1), kBackoffMaxS);
  w->last_error = why;
  if (w->state != "refused") w->state = "backoff";
  w->reconnect = true;       // a fresh channel next time (no reconnect backoff of the old one)
  job->canceller->Cancel();  // the call (or its opening) stuck on this daemon returns
  Forget(job);
}

void PoolState::Forget(const std::shared_ptr<Job>& job) {
  if (!job->over() || job->handed < job->received) return;
  auto& jobs = job->worker->jobs;
  jobs.erase(std::remove(jobs.begin(), jobs.end(), job), jobs.end());
}

void PoolState::CheckStalls(double now) {
  const double stall = absl::ToDoubleSeconds(options.stall_timeout);
  for (auto& [addr, w] : workers) {
    for (const auto& job : w->jobs) {
      const BatchRange& r = job->range;
      if (!job->over() && r.g <= next && next < r.g + r.count && now - job->progress > stall) {
        Abandon(job, absl::StrCat("stalled: no batch for ", now - job->progress, " s"));
        return;  // Abandon changed w->jobs
      }
    }
  }
}

std::string PoolState::Describe() const {
  std::vector<std::string> parts;
  for (const auto& [addr, w] : workers) {
    parts.push_back(absl::StrCat(addr, ": ", w->state,
                                 w->last_error.empty() ? "" : " (" + w->last_error + ")"));
  }
  std::string names;
  for (const auto& [name, why] : servers->Errors()) {
    absl::StrAppend(&names, names.empty() ? "; unresolved names: " : ", ", name, " (", why, ")");
  }
  return absl::StrCat(parts.empty() ? "no daemon" : absl::StrJoin(parts, "; "), names);
}

void PoolState::ResolveLoop() {
  while (true) {
    {
      MutexLock lock(&mu);
      const uint64_t until = ToNs(NowS() + absl::ToDoubleSeconds(options.resolve_every));
      while (!closed && ToNs(NowS()) < until) cv.WaitUntilMonotonic(&mu, until);
      if (closed) return;
    }
    servers->Resolve();
    const std::vector<PoolEndpoint> now = servers->Current();
    MutexLock lock(&mu);
    if (closed) return;
    std::set<std::string> present;
    for (const PoolEndpoint& ep : now) {
      present.insert(ep.address);
      auto it = workers.find(ep.address);
      if (it == workers.end() ||
          (it->second->retired && it->second->jobs.empty() && !refused.count(ep.address))) {
        AddWorker(ep);
      }
    }
    for (auto& [addr, w] : workers) {
      if (!present.count(addr) && !w->retired) {
        w->retired = true;  // finishes the range it reads, takes no more
        w->state = "retired";
      }
    }
    cv.SignalAll();
  }
}

}  // namespace internal

// ------------------------------------------------------------------ PoolStream

absl::StatusOr<std::unique_ptr<PoolStream>> PoolStream::Open(std::vector<std::string> servers,
                                                             const StreamOptions& options,
                                                             const PoolOptions& pool,
                                                             const ClientOptions& client) {
  if (options.pin_memory || !options.gpu_uuid.empty()) {
    return absl::InvalidArgumentError(
        "pin_memory and gpu_uuid are for one daemon on this host, not a pool");
  }
  if (pool.range_batches > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("range_batches must be within [1, 64] (the credits of a range's stream), got ",
                     pool.range_batches));
  }
  if (pool.streams_per_daemon < 1) {
    return absl::InvalidArgumentError("streams_per_daemon must be at least 1");
  }
  if (pool.ranges_ahead < pool.streams_per_daemon) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranges_ahead must be at least streams_per_daemon (", pool.streams_per_daemon,
                     "), got ", pool.ranges_ahead));
  }
  if (pool.buffer_bytes == 0) return absl::InvalidArgumentError("buffer_bytes must be positive");
  if (pool.stall_timeout <= absl::ZeroDuration() ||
      pool.unavailable_timeout <= absl::ZeroDuration() ||
      pool.resolve_every <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "stall_timeout, unavailable_timeout and resolve_every must be positive");
  }
  auto state = std::make_shared<internal::PoolState>();
  ASSIGN_OR_RETURN(state->servers, PoolServers::Create(std::move(servers), pool.resolver));
  state->request = options;
  state->options = pool;
  state->client_options = client;
  if (state->servers->has_names()) state->servers->Resolve();
  const std::vector<PoolEndpoint> endpoints = state->servers->Current();

  // The reference: the first daemon that answers with the pipeline.
  std::vector<std::string> why;
  bool found = false;
  for (const PoolEndpoint& ep : endpoints) {
    absl::StatusOr<Client> c = Client::Create(ep.address, client);
    if (!c.ok()) return c.status();
    absl::StatusOr<std::vector<v1::PipelineInfo>> infos = c->ListPipelines(internal::kCheckTimeout);
    if (!infos.ok()) {
      why.push_back(std::string(infos.status().message()));
      continue;
    }
    for (const auto& p : *infos) {
      if (p.name() == options.pipeline) {
        state->pipeline = p;
        found = true;
      }
    }
    if (found) break;
    why.push_back(absl::StrCat(ep.address, ": no pipeline \"", options.pipeline, "\""));
  }
  if (!found) {
    if (endpoints.empty()) why.push_back("no address");
    return absl::UnavailableError(
        absl::StrCat("no daemon of the pool [", absl::StrJoin(state->servers->entries(), ", "),
                     "] serves pipeline \"", options.pipeline, "\": ", absl::StrJoin(why, "; ")));
  }
  RangePlanOptions po;
  po.dataset_size = state->pipeline.dataset_size();
  po.batch_size = options.batch_size;
  po.world_size = options.world_size == 0 ? 1 : options.world_size;
  po.drop_last = options.drop_last;
  po.first_epoch = options.resume ? options.resume->epoch : options.first_epoch;
  po.num_epochs = options.num_epochs;
  if (options.resume && options.num_epochs != 0) {
    if (options.resume->epoch < options.first_epoch ||
        options.resume->epoch >= options.first_epoch + options.num_epochs) {
      return absl::OutOfRangeError(
          absl::StrCat("resume epoch ", options.resume->epoch, " is outside the stream's epochs"));
    }
    po.num_epochs = options.first_epoch + options.num_epochs - options.resume->epoch;
  }
  po.resume_offset = options.resume ? options.resume->offset : 0;
  po.range_batches = pool.range_batches != 0
                         ? pool.range_batches
                         : AutoRangeBatches(state->pipeline, options.batch_size, pool.ranges_ahead,
                                            pool.buffer_bytes);
  ASSIGN_OR_RETURN(RangePlan plan, RangePlan::Create(po));
  std::unique_ptr<PoolStream> stream(new PoolStream(state));
  stream->resume_ = ResumeState{po.first_epoch, po.resume_offset, po.world_size};
  {
    MutexLock lock(&state->mu);
    state->plan.emplace(std::move(plan));
    state->fresh = state->plan->Next();
    state->last_batch_at = internal::NowS();
    for (const PoolEndpoint& ep : endpoints) state->AddWorker(ep);
  }
  if (state->servers->has_names()) {
    internal::PoolState* raw = state.get();
    state->resolver = std::thread([raw] { raw->ResolveLoop(); });
  }
  return stream;
}

PoolStream::~PoolStream() { Close(); }

const v1::PipelineInfo& PoolStream::pipeline() const { return state_->pipeline; }

std::optional<uint64_t> PoolStream::total_batches() const {
  MutexLock lock(&state_->mu);
  return state_->plan->total();
}

absl::StatusOr<std::optional<BatchLease>> PoolStream::Next() {
  if (finished_) {
    if (!final_status_.ok()) return final_status_;
    return std::nullopt;
  }
  internal::PoolState& st = *state_;
  std::optional<BatchLease> out;
  absl::Status error;
  {
    MutexLock lock(&st.mu);
    const uint64_t g = st.next;
    const std::optional<uint64_t> total = st.plan->total();
    if (st.closed || (total.has_value() && g >= *total)) {
      finished_ = true;
    } else {
      const double start = internal::NowS();
      bool waited = false;
      st.waiting = true;
      while (true) {
        auto it = st.ready.find(g);
        if (it != st.ready.end()) {
          out.emplace(std::move(it->second.first));
          const std::shared_ptr<internal::Job> job = std::move(it->second.second);
          st.ready.erase(it);
          ++job->handed;
          st.Forget(job);
          st.next = g + 1;
          st.cv.SignalAll();
          break;
        }
        if (auto e = st.errors.find(g); e != st.errors.end()) {
          error = e->second;
          break;
        }
        if (st.closed) {
          error = absl::CancelledError("the pool stream was closed");
          break;
        }
        const double now = internal::NowS();
        waited = true;
        st.CheckStalls(now);
        if (now - std::max(st.last_batch_at, start) >
            absl::ToDoubleSeconds(st.options.unavailable_timeout)) {
          error = absl::UnavailableError(
              absl::StrCat("no batch came from any daemon of the pool for ",
                           absl::ToDoubleSeconds(st.options.unavailable_timeout), " s (batch ", g,
                           " awaited): ", st.Describe()));
          break;
        }
        st.cv.SignalAll();  // local_first: remote workers may help now
        st.cv.WaitUntilMonotonic(&st.mu, internal::ToNs(now + 0.05));
      }
      st.waiting = false;
      if (waited) {
        st.last_wait_end = internal::NowS();
        st.starved_seconds += st.last_wait_end - start;
      }
    }
  }
  if (!error.ok()) {
    Close();
    finished_ = true;
    final_status_ = error;
    return error;
  }
  if (!out.has_value()) {
    Close();
    return std::nullopt;
  }
  const v1::Batch& h = out->header();
  resume_ = h.end_of_epoch() ? ResumeState{h.epoch() + 1, 0, resume_.world_size}
                             : ResumeState{h.epoch(), h.offset(), resume_.world_size};
  return out;
}

void PoolStream::Close() {
  internal::PoolState& st = *state_;
  std::vector<std::thread> threads;
  std::map<uint64_t, std::pair<BatchLease, std::shared_ptr<internal::Job>>> dropped;
  {
    MutexLock lock(&st.mu);
    if (st.closed) return;
    st.closed = true;
    dropped.swap(st.ready);
    auto stop = [&threads](internal::Worker& w) {
      for (const auto& job : w.jobs) job->canceller->Cancel();
      for (std::thread& t : w.threads) threads.push_back(std::move(t));
      w.threads.clear();
    };
    for (auto& [addr, w] : st.workers) stop(*w);
    for (auto& w : st.gone) stop(*w);
    st.cv.SignalAll();
  }
  if (st.resolver.joinable()) threads.push_back(std::move(st.resolver));
  dropped.clear();  // their leases release (the streams are being cancelled anyway)
  for (std::thread& t : threads) t.join();
}

PoolStats PoolStream::stats() const {
  internal::PoolState& st = *state_;
  MutexLock lock(&st.mu);
  PoolStats out;
  out.starved_seconds = st.starved_seconds;
  out.next_batch = st.next;
  out.requeued = st.requeued;
  out.refused = st.refused;
  for (const auto& [addr, w] : st.workers) {
    PoolDaemonStats d;
    d.address = addr;
    d.name = w->endpoint.name;
    d.local = w->endpoint.entry == 0;
    d.state = w->state;
    d.ranges = w->ranges;
    d.batches = w->batches;
    for (const auto& j : w->jobs) d.in_flight += !j->over();
    d.last_error = w->last_error;
    out.daemons.push_back(std::move(d));
  }
  return out;
}

}  // namespace conveyor::client
