#include "remote/cached_shard_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/posix_error.h"
#include "core/data/await_read.h"
#include "core/engine/stats.h"
#include "remote/cache_read_op.h"
#include "remote/url.h"

namespace conveyor::remote {

namespace {

// A shard's HEAD answer is used by its reads for this long.
constexpr uint64_t kFreshNs = 1'000'000'000;

}  // namespace

struct CachedShardReader::State {
  explicit State(std::shared_ptr<ObjectCache> c) : cache(std::move(c)) {}
  const std::shared_ptr<ObjectCache> cache;
  struct Shard {
    ObjectValidators validators;
    uint64_t checked_ns = 0;  // 0: never
  };
  Mutex mu;
  std::map<std::string, Shard> shards ABSL_GUARDED_BY(mu);
  std::set<std::string> filling ABSL_GUARDED_BY(mu);
};

namespace {

using State = CachedShardReader::State;

// The shard at `key` is not held with `v`: the whole shard once, in the
// background, kept when it arrives whole.
void MaybeFill(const RemoteReader* reader, const std::shared_ptr<State>& s, const std::string& url,
               const std::string& key, const ObjectValidators& v, uint64_t max_shard_bytes) {
  if (v.size == 0 || v.size > max_shard_bytes) return;
  {
    MutexLock lock(&s->mu);
    if (s->filling.size() >= CachedShardReader::kMaxFills || s->filling.count(key) != 0) return;
    s->filling.insert(key);
  }
  auto body = std::make_shared<std::vector<uint8_t>>();
  reader->ReadWholeAsync(url, v.size, body.get(), [s, key, v, body](absl::Status st) {
    if (st.ok()) {
      s->cache->CountMiss(0, body->size());
      if (body->size() == v.size) s->cache->Put(key, v, *body);
    }
    MutexLock lock(&s->mu);
    s->filling.erase(key);
  });
}

}  // namespace

CachedShardReader::CachedShardReader(std::shared_ptr<const RemoteReader> reader,
                                     std::shared_ptr<ObjectCache> cache, uint64_t max_shard_bytes)
    : reader_(std::move(reader)),
      cache_(cache),
      max_shard_bytes_(max_shard_bytes),
      state_(std::make_shared<State>(std::move(cache))) {}

absl::StatusOr<uint64_t> CachedShardReader::Size(std::string_view object) const {
  return reader_->Size(object);
}

absl::Status CachedShardReader::ReadRange(std::string_view object, uint64_t offset, uint64_t length,
                                          std::vector<uint8_t>* out) const {
  return AwaitRead(
      [&](ReadDone done) { return ReadRangeAsync(object, offset, length, out, std::move(done)); });
}

std::shared_ptr<PendingRead> CachedShardReader::ReadRangeAsync(std::string_view object,
                                                               uint64_t offset, uint64_t length,
                                                               std::vector<uint8_t>* out,
                                                               ReadDone done) const {
  const std::string key = RedactUrl(object);
  const uint64_t now = MonotonicNanos();
  ObjectValidators fresh;
  bool have = false;
  {
    MutexLock lock(&state_->mu);
    auto it = state_->shards.find(key);
    if (it != state_->shards.end() && now - it->second.checked_ns <= kFreshNs) {
      fresh = it->second.validators;
      have = true;
    }
  }
  if (have && cache_->GetRange(key, fresh, offset, length, out)) {
    done(absl::OkStatus());
    return nullptr;
  }
  if (have) {
    // Fresh but not held (yet): the network, and the whole shard once.
    MaybeFill(reader_.get(), state_, std::string(object), key, fresh, max_shard_bytes_);
    cache_->CountMiss(1, length);
    return reader_->ReadRangeAsync(object, offset, length, out, std::move(done));
  }
  // Revalidate, then as above. Bytes reach *out only through the op
  // (remote/cache_read_op.h), so a cancelled read's buffer is never written.
  auto op = std::make_shared<Op>();
  op->object = std::string(object);
  op->key = key;
  {
    MutexLock lock(&op->mu);
    op->out = out;
    op->done = std::move(done);
  }
  const RemoteReader* reader = reader_.get();
  std::shared_ptr<State> s = state_;
  const uint64_t max_shard = max_shard_bytes_;
  std::shared_ptr<PendingRead> head = reader_->StatAsync(
      object, &op->validators, [reader, s, max_shard, op, offset, length](absl::Status st) {
        if (Finished(op.get())) return;
        if (absl::IsCancelled(st) || IsSystemError(st)) return op->Finish(std::move(st));
        if (st.ok()) {
          {
            MutexLock lock(&s->mu);
            s->shards[op->key] = State::Shard{op->validators, MonotonicNanos()};
          }
          std::vector<uint8_t> bytes;
          if (s->cache->GetRange(op->key, op->validators, offset, length, &bytes)) {
            return op->Finish(absl::OkStatus(), &bytes, /*take=*/true);
          }
          MaybeFill(reader, s, op->object, op->key, op->validators, max_shard);
        }
        s->cache->CountMiss(1, length);
        auto body = std::make_shared<std::vector<uint8_t>>();
        SetInner(op.get(), reader->ReadRangeAsync(
                               op->object, offset, length, body.get(), [op, body](absl::Status r) {
                                 op->Finish(std::move(r), body.get(), /*take=*/true);
                               }));
      });
  SetInner(op.get(), std::move(head));
  if (Finished(op.get())) return nullptr;
  return std::make_shared<OpHandle>(op);
}

bool CachedShardReader::HeldAndFresh(const std::string& key) const {
  {
    MutexLock lock(&state_->mu);
    auto it = state_->shards.find(key);
    if (it == state_->shards.end() || MonotonicNanos() - it->second.checked_ns > kFreshNs) {
      return false;
    }
  }
  return cache_->Contains(key);
}

bool CachedShardReader::Prefetch(std::string_view object, uint64_t offset, uint64_t length) const {
  if (HeldAndFresh(RedactUrl(object))) return true;
  return reader_->Prefetch(object, offset, length);
}

bool CachedShardReader::PrefetchRun(std::string_view object, std::span<const Range> parts) const {
  if (HeldAndFresh(RedactUrl(object))) return true;
  return reader_->PrefetchRun(object, parts);
}

}  // namespace conveyor::remote
