#include "remote/cached_object_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/engine/stats.h"
#include "remote/cache_read_op.h"
#include "remote/url.h"

namespace conveyor::remote {

// A GET filling the cache, and the reads waiting on it.
struct CachedObjectReader::Flight {
  std::vector<uint8_t> body;
  std::vector<std::shared_ptr<Op>> waiters;  // guarded by State::mu
};

struct CachedObjectReader::State {
  explicit State(std::shared_ptr<ObjectCache> c) : cache(std::move(c)) {}
  const std::shared_ptr<ObjectCache> cache;
  Mutex mu;
  // By key + validators.
  std::map<std::string, std::shared_ptr<Flight>> flights ABSL_GUARDED_BY(mu);
  // Keys with a flight, and how many (PrefetchWhole starts none for them).
  std::map<std::string, int> filling ABSL_GUARDED_BY(mu);
  uint64_t fills ABSL_GUARDED_BY(mu) = 0;
};

namespace {

// A HEAD sent ahead is used up to a second after its answer came
// (RemoteReader::StatAsync): its freshness is counted from a second earlier.
constexpr uint64_t kHeadAgeMarginNs = 1'000'000'000;

// Until when (MonotonicNanos) the version the HEAD named may be served
// without asking again; 0 when its answer declared no freshness.
uint64_t FreshUntil(const ObjectValidators& v) {
  const uint64_t fresh_ns = v.fresh_seconds * 1'000'000'000;
  return fresh_ns > kHeadAgeMarginNs ? MonotonicNanos() + fresh_ns - kHeadAgeMarginNs : 0;
}

std::string FlightKey(const Op& op) {
  return absl::StrCat(op.key, "\n", op.validators.etag, "\n", op.validators.last_modified, "\n",
                      op.validators.size);
}

// The uncached path: the GET's answer is the read's.
void Uncached(const RemoteReader* reader, const std::shared_ptr<Op>& op) {
  auto body = std::make_shared<std::vector<uint8_t>>();
  std::shared_ptr<PendingRead> p = reader->ReadWholeAsync(
      op->object, op->max_bytes, body.get(),
      [op, body](absl::Status st) { op->Finish(std::move(st), body.get(), /*take=*/true); });
  SetInner(op.get(), std::move(p));
}

void Revalidated(const RemoteReader* reader, const std::shared_ptr<CachedObjectReader::State>& s,
                 const std::shared_ptr<Op>& op, absl::Status head) {
  {
    MutexLock lock(&op->mu);
    if (op->finished) return;  // cancelled
  }
  // Cancelled, or the host is down after the HEAD's own retries (an error
  // of the system): the read's answer, not retried again through a GET.
  if (absl::IsCancelled(head) || IsSystemError(head)) return op->Finish(std::move(head));
  // Any other failure (a server without HEAD: 405, 501, ...), or too
  // large: an uncached GET, whose answer decides.
  if (!head.ok() || op->validators.size > op->max_bytes) return Uncached(reader, op);
  const uint64_t fresh_until = FreshUntil(op->validators);
  {
    std::vector<uint8_t> bytes;
    if (s->cache->Get(op->key, op->validators, &bytes)) {
      if (fresh_until != 0) s->cache->MarkFresh(op->key, op->validators, fresh_until);
      return op->Finish(absl::OkStatus(), &bytes, /*take=*/true);
    }
  }
  const std::string fkey = FlightKey(*op);
  std::shared_ptr<CachedObjectReader::Flight> flight;
  {
    MutexLock lock(&s->mu);
    auto it = s->flights.find(fkey);
    if (it != s->flights.end()) {
      it->second->waiters.push_back(op);  // one GET for concurrent misses
      return;
    }
    flight = std::make_shared<CachedObjectReader::Flight>();
    flight->waiters.push_back(op);
    s->flights.emplace(fkey, flight);
    ++s->filling[op->key];
    ++s->fills;
  }
  const ObjectValidators v = op->validators;
  const std::string key = op->key;
  // Not cancelled with any one waiter: the others wait on it too.
  reader->ReadWholeAsync(op->object, op->max_bytes, &flight->body,
                         [s, flight, fkey, key, v, fresh_until](absl::Status st) {
                           // Kept before the flight ends: a read revalidated from now on finds
                           // either the flight or the entry, so a miss is one GET.
                           if (st.ok() && flight->body.size() == v.size) {
                             s->cache->Put(key, v, flight->body);
                             if (fresh_until != 0) s->cache->MarkFresh(key, v, fresh_until);
                           }
                           std::vector<std::shared_ptr<Op>> waiters;
                           {
                             MutexLock lock(&s->mu);
                             s->flights.erase(fkey);
                             if (--s->filling[key] == 0) s->filling.erase(key);
                             waiters.swap(flight->waiters);
                           }
                           if (st.ok()) s->cache->CountMiss(waiters.size(), flight->body.size());
                           for (size_t i = 0; i < waiters.size(); ++i) {
                             waiters[i]->Finish(st, &flight->body,
                                                /*take=*/i + 1 == waiters.size());
                           }
                         });
}

}  // namespace

CachedObjectReader::CachedObjectReader(std::shared_ptr<const RemoteReader> reader,
                                       std::shared_ptr<ObjectCache> cache)
    : reader_(std::move(reader)),
      cache_(cache),
      state_(std::make_shared<State>(std::move(cache))) {}

std::shared_ptr<PendingRead> CachedObjectReader::ReadWholeAsync(std::string_view object,
                                                                uint64_t max_bytes,
                                                                std::vector<uint8_t>* out,
                                                                ReadDone done) const {
  const std::string key = RedactUrl(object);
  // A version its server declared fresh: served without a HEAD, on this
  // thread (one read of local disk), as an uncached local read would be.
  if (const std::optional<ObjectValidators> v = cache_->FreshValidators(key, MonotonicNanos());
      v.has_value() && v->size <= max_bytes && cache_->Get(key, *v, out)) {
    done(absl::OkStatus());
    return nullptr;
  }
  auto op = std::make_shared<Op>();
  op->object = std::string(object);
  op->key = key;
  op->max_bytes = max_bytes;
  {
    MutexLock lock(&op->mu);
    op->out = out;
    op->done = std::move(done);
  }
  const RemoteReader* reader = reader_.get();
  std::shared_ptr<State> s = state_;
  std::shared_ptr<PendingRead> head = reader_->StatAsync(
      object, &op->validators,
      [reader, s, op](absl::Status st) { Revalidated(reader, s, op, std::move(st)); });
  SetInner(op.get(), std::move(head));
  {
    MutexLock lock(&op->mu);
    if (op->finished) return nullptr;
  }
  return std::make_shared<OpHandle>(op);
}

bool CachedObjectReader::PrefetchWhole(std::string_view object, uint64_t max_bytes) const {
  // Held, or being fetched for a read: the read's HEAD decides, and no
  // second GET goes out for bytes on their way. Checked and started under
  // the state's mutex, so a fill starts either before (and is seen here) or
  // after (and claims this prefetch): never a second GET beside it. (Lock
  // order: the state's mutex, then the remote reader's; the reader calls
  // out with none of its own held.)
  const std::string key = RedactUrl(object);
  // Fresh: its read asks the server nothing, so nothing is sent ahead.
  if (cache_->FreshValidators(key, MonotonicNanos()).has_value()) return true;
  MutexLock lock(&state_->mu);
  if (state_->filling.count(key) != 0) return true;
  // The read's HEAD goes out with the read-ahead, so a hit waits for no
  // round trip when its read comes.
  if (cache_->Contains(key)) return reader_->PrefetchStat(object);
  return reader_->PrefetchWhole(object, max_bytes) && reader_->PrefetchStat(object);
}

uint64_t CachedObjectReader::fills() const {
  MutexLock lock(&state_->mu);
  return state_->fills;
}

}  // namespace conveyor::remote
