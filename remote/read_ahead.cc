// The remote reader's read-ahead and hand-over (RemoteReader::Impl,
// remote/remote_reader_impl.h): a read claims its prefetched request or
// submits one and waits for it; prefetches (single ranges, whole objects,
// runs of parts) are started within the read-ahead byte budget and kept
// until claimed or until they expire; a finished request is settled under
// the reader's mutex and its reader woken, or an asynchronous read's
// completion run once the mutex is released.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/engine/stats.h"
#include "remote/remote_reader_impl.h"

namespace conveyor::remote {

namespace {

// Prefetched bytes nobody claimed for this long are dropped (a stream that
// ended or moved on will not come for them).
constexpr uint64_t kUnclaimedTtlNs = 120'000'000'000ull;
// Prefetches kept at most, whatever their size.
constexpr size_t kMaxPending = 1u << 16;

}  // namespace

absl::Status RemoteReader::Impl::Await(const RequestPtr& r, std::vector<uint8_t>* out,
                                       uint64_t* size) const {
  MutexLock lock(&mu_);
  while (!r->done) cv_.Wait(&mu_);
  if (!r->status.ok()) return r->status;
  if (out != nullptr) {
    out->swap(r->body);
    r->body.clear();
    r->body.shrink_to_fit();
  }
  if (size != nullptr) *size = r->size;
  return absl::OkStatus();
}

// An asynchronous read's handle: cancels by detaching the completion from
// the request (under the reader's mutex), so the settling finds none.
// REQUIRES: the reader outlives the handle's Cancel and progress calls (the
// engine keeps the source, and with it the reader, alive while it holds one).
class RemoteReader::Impl::Pending final : public PendingRead {
 public:
  Pending(const Impl* impl, RequestPtr r) : impl_(impl), r_(std::move(r)) {}

  void Cancel() override {
    ReadDone done;
    {
      MutexLock lock(&impl_->mu_);
      done = std::exchange(r_->on_done, nullptr);
      r_->out = nullptr;
    }
    if (done) done(absl::CancelledError(absl::StrCat("reading ", r_->name, ": cancelled")));
  }

  Progress progress() const override {
    return Progress{r_->name, r_->host, r_->progress.load(std::memory_order_relaxed)};
  }

 private:
  const Impl* const impl_;
  const RequestPtr r_;
};

std::shared_ptr<PendingRead> RemoteReader::Impl::AwaitAsync(const RequestPtr& r,
                                                            std::vector<uint8_t>* out,
                                                            ReadDone done) const {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    if (!r->done) {
      r->on_done = std::move(done);
      r->out = out;
      return std::make_shared<Pending>(this, r);
    }
    // Done already (a prefetch that arrived): handed over here, as Await does.
    status = r->status;
    if (status.ok()) {
      out->swap(r->body);
      r->body.clear();
      r->body.shrink_to_fit();
    }
  }
  done(std::move(status));
  return nullptr;
}

void RemoteReader::Impl::RunReadyCompletions() const {
  std::vector<std::pair<ReadDone, absl::Status>> ready;
  {
    MutexLock lock(&mu_);
    if (done_ready_.empty()) return;
    ready.swap(done_ready_);
  }
  for (auto& [done, status] : ready) done(std::move(status));
}

absl::StatusOr<RequestPtr> RemoteReader::Impl::Claim(std::string_view object, uint64_t offset,
                                                     uint64_t length, uint64_t max_bytes,
                                                     bool head) const {
  absl::StatusOr<RequestPtr> made = NewRequest(object, offset, length, max_bytes, head);
  if (!made.ok()) return made.status();
  RequestPtr r = *std::move(made);
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (auto it = pending_.find(r->key); it != pending_.end()) {
      r = std::move(it->second);
      pending_.erase(it);
      prefetch_hits_.fetch_add(1, std::memory_order_relaxed);
      if (r->done) {
        readahead_bytes_ -= r->body.size();
      } else {
        --prefetch_inflight_;
      }
    } else {
      submissions_.push_back(r);
    }
    r->claimed = true;
    if (!r->done) {
      ++claims_waiting_;
      wake = true;  // a read waits: the I/O thread neither sleeps nor pauses on it
      // Ahead of the read-ahead in its host's queue: a host's limit may hold
      // few transfers (remote/host_concurrency.h), and a read waits on this one.
      claimed_first_.push_back(r);
    }
  }
  if (wake) driver_->Wake();
  return r;
}

bool RemoteReader::Impl::Prefetch(std::string_view object, uint64_t offset, uint64_t length,
                                  uint64_t max_bytes, bool head) const {
  absl::StatusOr<RequestPtr> r = NewRequest(object, offset, length, max_bytes, head);
  if (!r.ok()) return true;  // the read will report it
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (pending_.count((*r)->key) != 0) return true;
    const uint64_t estimate = length != kWhole ? length : avg_object_bytes_;
    if (pending_.size() >= kMaxPending ||
        readahead_bytes_ + (prefetch_inflight_ + 1) * estimate > options_.read_ahead_bytes) {
      return false;
    }
    pending_.emplace((*r)->key, *r);
    ++prefetch_inflight_;
    // The I/O thread takes submissions on its next turn; with transfers
    // in flight that comes soon, so only an idle one is woken.
    wake = submissions_.empty() && !io_busy_;
    submissions_.push_back(*r);
  }
  if (wake) driver_->Wake();
  return true;
}

// One request for parts [first, last] of `object` (ascending, close
// together), cut into a prefetch per part when it completes. Parts whose
// prefetch is under way already are left to it.
bool RemoteReader::Impl::PrefetchRun(std::string_view object,
                                     std::span<const ByteRangeReader::Range> parts) const {
  const ByteRangeReader::Range& first = parts.front();
  const ByteRangeReader::Range& last = parts.back();
  if (parts.size() == 1) return Prefetch(object, first.offset, first.length, first.length);
  const uint64_t span = last.offset + last.length - first.offset;
  absl::StatusOr<RequestPtr> made = NewRequest(object, first.offset, span, span, false);
  if (!made.ok()) return true;  // the reads will report it
  RequestPtr run = *std::move(made);
  std::vector<RequestPtr> members;
  members.reserve(parts.size());
  for (const ByteRangeReader::Range& p : parts) {
    auto m = std::make_shared<Request>();
    m->key = RequestKey(/*head=*/false, p.offset, p.length, object);
    m->name = run->name;
    m->host = run->host;
    m->offset = p.offset;
    m->length = p.length;
    m->max_bytes = p.length;
    members.push_back(std::move(m));
  }
  bool wake = false;
  {
    MutexLock lock(&mu_);
    uint64_t bytes = 0;
    for (const RequestPtr& m : members) {
      if (pending_.count(m->key) == 0) {
        run->parts.push_back(m);
        bytes += m->length;
      }
    }
    if (run->parts.empty()) return true;
    const uint64_t n = run->parts.size();
    if (pending_.size() + n > kMaxPending ||
        readahead_bytes_ + prefetch_inflight_ * (bytes / n) + bytes > options_.read_ahead_bytes) {
      return false;
    }
    for (const RequestPtr& m : run->parts) pending_.emplace(m->key, m);
    prefetch_inflight_ += n;
    wake = submissions_.empty() && !io_busy_;
    submissions_.push_back(std::move(run));
  }
  if (wake) driver_->Wake();
  return true;
}

RemoteReader::Counters RemoteReader::Impl::counters() const {
  Counters c;
  c.requests_started = requests_started_.load(std::memory_order_relaxed);
  c.retries = retries_.load(std::memory_order_relaxed);
  c.prefetch_hits = prefetch_hits_.load(std::memory_order_relaxed);
  c.max_in_flight = max_in_flight_.load(std::memory_order_relaxed);
  c.direct_requests = direct_ != nullptr ? direct_->requests() : 0;
  MutexLock lock(&mu_);
  c.readahead_bytes = readahead_bytes_;
  return c;
}

// Settles `r` (a run: its parts) with `status` and lets go of the I/O
// thread's reference to it (r is null after). The reference is dropped
// under the lock, before any reader is woken, so the last one always
// belongs to the reader that claims the request (or the read-ahead map):
// a status a reader copied is then freed on the reader's thread, never
// under it on this one (absl::Status shares its message between copies).
void RemoteReader::Impl::Complete(RequestPtr& r, absl::Status status) {
  ReleaseEasy(r.get());
  const uint64_t now = MonotonicNanos();
  {
    MutexLock lock(&mu_);
    bool waited_for = false;
    if (r->parts.empty()) {
      waited_for = Settle(r, std::move(status), now);
    } else {
      // Each part holds its bytes already (Store). An answer that ended
      // early (the object is shorter than the run) fails the parts it cut.
      for (const RequestPtr& part : r->parts) {
        absl::Status part_status = Unshared(status);
        if (status.ok() && part->body.size() != part->length) {
          part_status = absl::OutOfRangeError(absl::StrCat(
              "GET ", r->name, ": bytes [", part->offset, ", ", part->offset + part->length,
              ") asked, the object ends at byte ", r->offset + r->received));
        }
        waited_for |= Settle(part, std::move(part_status), now);
      }
      r->done = true;
      r->parts.clear();
    }
    r.reset();
    if (waited_for) cv_.SignalAll();  // only a claimed request has anyone waiting for it
  }
  RunReadyCompletions();  // asynchronous reads': after the mutex is released
}

// Marks `r` (a request or a run's part) done with `status` and settles the
// read-ahead accounting: an unclaimed one's bytes are kept for its read. True
// when it was claimed (a reader waits for it).
bool RemoteReader::Impl::Settle(const RequestPtr& r, absl::Status status, uint64_t now) const {
  if (!status.ok()) r->body.clear();
  r->status = std::move(status);
  r->done = true;
  r->done_ns = now;
  if (r->status.ok() && r->length == kWhole) {
    avg_object_bytes_ = (avg_object_bytes_ * 7 + std::max<uint64_t>(r->body.size(), 1)) / 8;
  }
  if (!r->claimed) {
    --prefetch_inflight_;
    readahead_bytes_ += r->body.size();
    return false;
  }
  --claims_waiting_;
  if (r->on_done) {
    // An asynchronous read: its bytes go to its buffer now, its completion
    // runs once the mutex is released (RunReadyCompletions).
    if (r->status.ok()) {
      r->out->swap(r->body);
      r->body.clear();
      r->body.shrink_to_fit();
    }
    done_ready_.emplace_back(std::exchange(r->on_done, nullptr), Unshared(r->status));
    r->out = nullptr;
  }
  // (Otherwise a synchronous read, whose Await takes the result, or a
  // cancelled asynchronous one, whose bytes go with the request.)
  return true;
}

void RemoteReader::Impl::DropUnclaimed(uint64_t now) {
  MutexLock lock(&mu_);
  for (auto it = pending_.begin(); it != pending_.end();) {
    const Request& r = *it->second;
    if (r.done && now - r.done_ns > kUnclaimedTtlNs) {
      readahead_bytes_ -= r.body.size();
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace conveyor::remote
